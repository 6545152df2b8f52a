"""The operator's console of `journal serve`, clicked through in a real headless Chromium:
searching and paging the list, the waterfall, and each action (cancel, resume, fork with an
edited value, retry, approving a typed promise). With CI=true these run, never skip.

JOURNAL_UPDATE_SCREENSHOT=1 writes the screenshots of docs/http.md again (docs/img/console-*.png);
otherwise they go to a temporary directory, so a test run leaves the docs alone."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from .serving import Server, wait_for

# The fixture that gives Chromium a profile of its own, and Playwright's `expect` once that
# module has checked that Chromium is there (or skipped, outside CI).
from .test_serve_ui import browser, expect  # noqa: F401

DOCS_IMG = Path(__file__).parents[2] / "docs" / "img"


def _shot(page, tmp_path, name):
    path = DOCS_IMG / name if os.environ.get("JOURNAL_UPDATE_SCREENSHOT") == "1" else tmp_path / name
    assert page.screenshot(path=str(path), full_page=True).startswith(b"\x89PNG")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console")
    s = Server(str(tmp / "db"), tmp / "serve.log")
    yield s
    s.stop()


_REFUSED = re.compile(r"Failed to load resource: the server responded with a status of (\d+)")


class Refusals:
    """The answers a test expects the server to refuse with: Chromium reports each one on the
    console, which is otherwise a page error."""

    def __init__(self) -> None:
        self.expected: set[int] = set()


@pytest.fixture
def refusals():
    return Refusals()


@pytest.fixture
def page(browser, server, refusals):  # noqa: F811
    yield from _watched(browser, server, refusals)


def _watched(browser, server, refusals):  # noqa: F811
    """A page that must load nothing from outside the server and report no error."""
    page = browser.new_page()
    outside: list[str] = []
    errors: list[str] = []

    def console(message):
        refused = _REFUSED.match(message.text)
        if message.type == "error" and not (refused and int(refused.group(1)) in refusals.expected):
            errors.append(message.text)

    page.on("request", lambda r: None if r.url.startswith(server.url) else outside.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", console)
    yield page
    page.close()
    assert outside == [], f"the UI loaded something from outside the server: {outside}"
    assert errors == [], f"the page reported errors: {errors}"


def _finished(server, invocation_id):
    return server.client.get(f"/invocations/{invocation_id}/result", params={"wait": 20}).json()


def test_search_and_filters_narrow_the_list_and_pages_go_on(page, server, tmp_path):
    for n in range(3):
        server.client.post("/invocations", json={"handler": "echo", "input": f"needle {n}", "id": f"needle-{n}"})
    server.client.post("/invocations", json={"handler": "planned", "input": "hay", "id": "hay-1", "key": "barn"})
    for i in ("needle-0", "needle-1", "needle-2", "hay-1"):
        _finished(server, i)
    page.goto(server.url + "/")
    expect(page.locator('tr[data-id="hay-1"]')).to_be_visible()
    _shot(page, tmp_path, "console-list.png")

    page.fill("#filter-q", "needle")
    page.press("#filter-q", "Enter")
    expect(page.locator("#invocations tbody tr[data-id]")).to_have_count(3)
    expect(page.locator('tr[data-id="hay-1"]')).to_have_count(0)
    assert "q=needle" in page.url

    page.fill("#filter-q", "")
    page.fill("#filter-key", "barn")
    page.click("#search button[type=submit]")
    expect(page.locator("#invocations tbody tr[data-id]")).to_have_count(1)
    expect(page.locator('tr[data-id="hay-1"]')).to_be_visible()

    page.fill("#filter-key", "")
    page.fill("#filter-handler", "planned")
    page.click("#search button[type=submit]")
    expect(page.locator("#invocations tbody tr[data-id]")).to_have_count(1)
    page.locator('button[data-filter="failed"]').click()
    expect(page.locator("#invocations tbody tr[data-id]")).to_have_count(0)
    expect(page.locator("#invocations tbody")).to_contain_text("No invocations match.")

    # Pages of two, newest first, through the API's cursor.
    page.goto(server.url + "/?q=needle&limit=2")
    rows = page.locator("#invocations tbody tr[data-id]")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-id", "needle-2")
    expect(page.locator("#prev-page")).to_be_disabled()
    page.click("#next-page")
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_have_attribute("data-id", "needle-0")
    expect(page.locator("#page-number")).to_have_text("page 2")
    expect(page.locator("#next-page")).to_be_disabled()
    page.click("#prev-page")
    expect(rows.nth(0)).to_have_attribute("data-id", "needle-2")

    # A time window that ends before them holds none of them.
    page.goto(server.url + "/?q=needle&until=2000-01-01T00:00:00Z")
    expect(page.locator("#invocations tbody")).to_contain_text("No invocations match.")


def test_the_waterfall_has_one_bar_per_step_with_retries_and_replays_marked(page, server, tmp_path):
    server.client.post("/invocations", json={"handler": "planned", "input": "soup", "id": "wf-plan"})
    server.client.post("/invocations", json={"handler": "flaky", "input": str(tmp_path / "m"), "id": "wf-flaky"})
    _finished(server, "wf-plan")
    _finished(server, "wf-flaky")
    page.goto(server.url + "/i/wf-plan")
    lanes = page.locator("#waterfall .lane")
    expect(lanes).to_have_count(2)
    expect(lanes.nth(0)).to_have_attribute("data-step", "plan")
    expect(lanes.nth(1)).to_have_attribute("data-step", "write")
    for n in range(2):
        expect(lanes.nth(n).locator(".bar-label")).to_contain_text(re.compile(r"\d+(\.\d+)? (ms|s)"))
    # The write started when the plan was committed: its bar begins where the plan's ends.
    plan, write = (lanes.nth(n).locator(".bar").bounding_box() for n in range(2))
    assert abs((plan["x"] + plan["width"]) - write["x"]) < 2

    page.goto(server.url + "/i/wf-flaky")
    expect(page.locator("#waterfall .lane")).to_have_count(1)
    expect(page.locator("#waterfall .lane .bar-label")).to_contain_text("2 attempts")

    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "WF"}, "id": "wf-approve"})
    server.wait_status("wf-approve", "suspended")
    page.goto(server.url + "/i/wf-approve")
    expect(page.locator("#waterfall .lane")).to_have_count(1)
    expect(page.locator('.promise[data-promise="approval"]')).to_be_visible()
    _shot(page, tmp_path, "console-waiting.png")
    page.locator('.promise[data-promise="approval"] button.approve').click()
    expect(page.locator("#status .status")).to_have_text("completed", timeout=20000)
    lanes = page.locator("#waterfall .lane")
    expect(lanes).to_have_count(2)
    expect(lanes.nth(0).locator(".bar.replayed")).to_have_count(1)  # the resume replayed the draft
    expect(lanes.nth(1).locator(".bar.replayed")).to_have_count(0)  # and ran the refund live


def test_markup_in_a_step_name_stays_text_in_the_waterfall_and_the_fork_form(page, server):
    hostile = '<img src=x onerror="window.__pwned = 1">'
    server.client.post("/invocations", json={"handler": "named", "input": hostile, "id": "named-1"})
    _finished(server, "named-1")
    page.goto(server.url + "/i/named-1")
    expect(page.locator("#waterfall .lane .lane-name")).to_have_text("1 " + hostile)
    page.click("#fork")
    page.select_option("#fork-edit", "1")
    expect(page.locator("#fork-edit option:checked")).to_have_text("replace step 1 " + hostile)
    expect(page.locator("#fork-value")).to_have_value(json.dumps(hostile))
    assert page.locator("img").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_cancel_asks_first_and_rolls_the_keys_state_back(page, server):
    server.client.post("/invocations", json={"handler": "drafting", "input": "draft one", "id": "cx", "key": "cx-key"})
    server.wait_status("cx", "suspended")
    page.goto(server.url + "/i/cx")
    page.click("#cancel")
    confirm = page.locator("#cancel-confirm")
    expect(confirm).to_contain_text("cx-key")
    page.click("#keep")  # changed their mind: nothing happens
    expect(confirm).to_have_count(0)
    assert server.status("cx")["status"] == "suspended"

    page.click("#cancel")
    page.check("#rollback")
    page.click("#confirm-cancel")
    expect(page.locator("#status .status")).to_have_text("cancelled", timeout=20000)
    assert server.client.get("/keys/cx-key/state").json()["state"] == {}
    expect(page.locator('#timeline tr[data-kind="cancelled"]')).to_have_count(1)


def test_fork_with_an_edited_value_checks_the_json_and_opens_the_fork(page, server, tmp_path, refusals):
    refusals.expected.add(409)  # the second fork, to an id that exists
    server.client.post("/invocations", json={"handler": "planned", "input": "tea", "id": "fk"})
    _finished(server, "fk")
    page.goto(server.url + "/i/fk")
    page.click("#fork")
    form = page.locator("#fork-form")
    page.select_option("#fork-at", "2")
    page.select_option("#fork-edit", "1")
    expect(page.locator("#fork-value")).to_have_value('"plan for tea"')  # the recorded value, to edit
    page.fill("#fork-value", '"a better plan')
    expect(page.locator("#fork-problem")).to_contain_text("not JSON")
    expect(page.locator("#fork-submit")).to_be_disabled()
    page.fill("#fork-value", '"a better plan"')
    expect(page.locator("#fork-problem")).to_have_text("")
    page.fill("#fork-new-id", "fk-better")
    _shot(page, tmp_path, "console-fork.png")
    form.locator("#fork-submit").click()
    page.wait_for_url("**/i/fk-better")
    expect(page.locator("#result")).to_have_text("wrote from: a better plan", timeout=20000)
    expect(page.locator("#forked-from a")).to_have_text("fk")
    assert _finished(server, "fk")["result"] == "wrote from: plan for tea"  # the original is as it was

    # What the server refuses, the form shows.
    page.goto(server.url + "/i/fk")
    page.click("#fork")
    page.fill("#fork-new-id", "fk-better")
    page.click("#fork-submit")
    expect(page.locator("#fork-problem")).to_contain_text("InvocationConflict")


def test_retry_reruns_a_failed_run_from_its_failing_step(page, server, tmp_path):
    marker = tmp_path / "fixed"
    server.client.post("/invocations", json={"handler": "checkout", "input": str(marker), "id": "rt"})
    assert _finished(server, "rt")["status"] == "failed"
    page.goto(server.url + "/i/rt")
    expect(page.locator("#error")).to_have_text("TerminalError: the card was declined")
    expect(page.locator("#waterfall .lane .bar.failed")).to_have_count(1)
    _shot(page, tmp_path, "console-failed.png")  # (the traceback test takes it again, with its traceback)
    marker.write_text("the card works now")
    page.click("#retry")
    page.wait_for_url(re.compile(r".*/i/rt-retry-[0-9]+$"))
    expect(page.locator("#result")).to_have_text("reserved, charged", timeout=20000)
    expect(page.locator("#waterfall .lane")).to_have_count(2)


def test_a_failed_run_shows_its_traceback(page, server, tmp_path):
    server.client.post("/invocations", json={"handler": "checkout", "input": str(tmp_path / "never"), "id": "tb"})
    assert _finished(server, "tb")["status"] == "failed"
    assert server.status("tb")["error"]["traceback"]
    page.goto(server.url + "/i/tb")
    frames = page.locator("#traceback li.frame")
    expect(frames.last).to_contain_text("serve_agents.py")
    expect(page.locator("#traceback")).to_contain_text("_charge")
    _shot(page, tmp_path, "console-failed.png")


def test_a_refused_approval_says_why_and_the_promise_stays_pending(page, server, tmp_path, refusals):
    refusals.expected.add(422)
    server.client.post("/invocations", json={"handler": "typed", "input": "T-1", "id": "typed-1"})
    doc = server.wait_status("typed-1", "suspended")
    (waiting,) = doc["waiting_on"]
    assert "schema" in waiting
    page.goto(server.url + "/i/typed-1")
    card = page.locator('.promise[data-promise="decision"]')
    # The box starts with a value of the promise's type, to edit.
    assert set(json.loads(card.locator("input.value-input").input_value())) == {"approved", "by"}
    card.locator("input.value-input").fill('{"approved": "yes"}')
    card.locator("button.approve").click()
    expect(card.locator(".refusal")).to_contain_text("PromiseValueRefused")
    expect(card.locator(".refusal")).to_contain_text("stays pending")
    assert server.status("typed-1")["status"] == "suspended"
    card.locator("input.value-input").fill('{"approved": true, "by": "ada"}')
    card.locator("button.approve").click()
    expect(page.locator("#result")).to_have_text("T-1: approved by ada", timeout=20000)


def test_a_run_waiting_on_a_spent_budget_is_allowed_more_from_the_console(page, server):
    assert server.client.put("/budgets/handler:spending", json={"tokens": 50, "per": "run"}).status_code == 200
    try:
        server.client.post("/invocations", json={"handler": "spending", "input": 3, "id": "spent-1"})
        server.wait_status("spent-1", "suspended")
        page.goto(server.url + "/i/spent-1")
        card = page.locator('.promise[data-promise="budget:handler:spending"]')
        expect(card.locator("button.approve")).to_have_text("Allow more")
        assert json.loads(card.locator("input.value-input").input_value()) == {"tokens": 10000}
        card.locator("button.approve").click()
        expect(page.locator("#result")).to_have_text("120", timeout=20000)
    finally:
        server.client.delete("/budgets/handler:spending")


def test_a_body_the_server_refuses_is_shown_and_the_promise_stays_pending(browser, tmp_path, refusals):  # noqa: F811
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log", "--max-body", "300")
    refusals.expected.add(413)
    pages = _watched(browser, s, refusals)
    page = next(pages)
    try:
        s.client.post("/invocations", json={"handler": "approve", "input": {"order": "B"}, "id": "big"})
        s.wait_status("big", "suspended")
        page.goto(s.url + "/i/big")
        card = page.locator('.promise[data-promise="approval"]')
        card.locator("input.value-input").fill('"' + "x" * 400 + '"')
        card.locator("button.approve").click()
        expect(card.locator(".refusal")).to_contain_text("over the limit of 300 bytes")
        assert s.status("big")["status"] == "suspended"
        card.locator("input.value-input").fill('{"approved": true, "by": "ada"}')
        card.locator("button.approve").click()
        expect(page.locator("#status .status")).to_have_text("completed", timeout=20000)
        next(pages, None)  # its checks
    finally:
        page.close()
        s.stop()


def test_resume_runs_a_pending_invocation_and_takes_over_one_whose_server_died(browser, tmp_path):  # noqa: F811
    db = str(tmp_path / "db")
    entered, marker = tmp_path / "entered", tmp_path / "go"
    first = Server(db, tmp_path / "first.log")
    first.client.post("/invocations", json={"handler": "gate", "id": "orphan",
                                            "input": {"entered": str(entered), "marker": str(marker)}})
    wait_for(entered.exists, what="the handler to be in flight")
    first.proc.send_signal(signal.SIGKILL)  # the server dies with the invocation running
    first.proc.wait()
    first.client.close()
    marker.write_text("go")

    second = Server(db, tmp_path / "second.log", "--workers", "0")  # nothing runs but what is asked
    pages = _watched(browser, second, Refusals())
    page = next(pages)
    try:
        second.client.post("/invocations", json={"handler": "echo", "input": "later", "id": "parked"})
        page.goto(second.url + "/i/parked")
        expect(page.locator("#status .status")).to_have_text("pending")
        page.click("#resume")
        expect(page.locator("#status .status")).to_have_text("completed", timeout=20000)
        expect(page.locator("#resume")).to_have_count(0)

        page.goto(second.url + "/i/orphan")
        expect(page.locator("#status .status")).to_have_text("running")
        assert second.status("orphan")["owner"]["alive"] is False
        expect(page.locator("#owner-gone")).to_be_visible()
        page.click("#resume")
        expect(page.locator("#status .status")).to_have_text("completed", timeout=20000)
        expect(page.locator("#result")).to_have_text("after")
        next(pages, None)  # its checks
    finally:
        page.close()
        second.stop()
