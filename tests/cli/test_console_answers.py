"""The console says what happened and sends what it says, in a real headless Chromium: Approve
never sends a no, a rejected approval reads "rejected", a refused action is shown as an error,
times carry their zone, and a running invocation whose owner died is marked in the list."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from .serving import Server, wait_for
from .test_serve_console import Refusals, _finished, _watched
from .test_serve_ui import browser, expect  # noqa: F401


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("answers")
    s = Server(str(tmp / "db"), tmp / "serve.log")
    yield s
    s.stop()


@pytest.fixture
def refusals():
    return Refusals()


@pytest.fixture
def page(browser, server, refusals):  # noqa: F811
    yield from _watched(browser, server, refusals)


def test_approve_starts_from_a_yes_shows_what_it_sends_and_never_sends_a_no(page, server):
    server.client.post("/invocations", json={"handler": "typed", "input": "R-1", "id": "yes-1"})
    doc = server.wait_status("yes-1", "suspended")
    assert doc["waiting_on"][0]["example"]["approved"] is False  # what the form used to start from
    page.goto(server.url + "/i/yes-1")
    card = page.locator('.promise[data-promise="decision"]')
    box = card.locator("input.value-input")
    assert json.loads(box.input_value())["approved"] is True
    expect(card.locator(".sends")).to_contain_text('"approved":true')
    # A value that says no is sent by a neutral button, never the green Approve.
    box.fill('{"approved": false, "by": "ada"}')
    expect(card.locator("button.approve")).to_have_count(0)
    expect(card.locator("button.plain")).to_have_text("Send")
    expect(card.locator(".sends")).to_contain_text('"approved":false')
    box.fill('{"approved": true, "by": "ada"}')
    card.locator("button.approve").click()
    expect(page.locator("#result")).to_have_text("R-1: approved by ada", timeout=20000)


def test_rejecting_an_approval_reads_rejected_and_offers_no_retry(page, server):
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "NO-1"}, "id": "no-1"})
    server.wait_status("no-1", "suspended")
    page.goto(server.url + "/i/no-1")
    card = page.locator('.promise[data-promise="approval"]')
    card.locator('input[aria-label="reason"]').fill("not this one")
    card.locator("button.reject").click()
    expect(page.locator("#status .status")).to_have_text("rejected", timeout=20000)
    assert server.status("no-1")["status"] == "failed"
    expect(page.locator("#retry")).to_have_count(0)


def test_times_are_shown_with_their_zone(page, server):
    server.client.post("/invocations", json={"handler": "echo", "input": "when", "id": "zoned"})
    doc = _finished(server, "zoned")
    assert doc["status"] == "completed"
    created = server.status("zoned")["created_at"]
    page.goto(server.url + "/i/zoned")
    shown = page.locator("#facts dd").filter(has_text="UTC").first
    expect(shown).to_have_text(created[:10] + " " + created[11:19] + " UTC")
    expect(page.locator('#timeline tr[data-kind="step"] td:nth-child(4)')).to_contain_text("UTC")


def test_a_fork_to_an_existing_id_says_what_to_do_in_the_console_s_words(page, server, refusals):
    refusals.expected.add(409)
    server.client.post("/invocations", json={"handler": "planned", "input": "x", "id": "fk-a"})
    _finished(server, "fk-a")
    page.goto(server.url + "/i/fk-a")
    page.click("#fork")
    page.fill("#fork-new-id", "fk-a")
    page.click("#fork-submit")
    problem = page.locator("#fork-problem")
    expect(problem).to_contain_text("InvocationConflict")
    expect(problem).not_to_contain_text("--new-id")


def test_a_refused_action_is_shown_as_an_error_and_a_dead_owner_is_marked_in_the_list(browser, tmp_path):  # noqa: F811
    db = str(tmp_path / "db")
    entered, marker = tmp_path / "entered", tmp_path / "go"
    first = Server(db, tmp_path / "first.log")
    first.client.post("/invocations", json={"handler": "gate", "id": "orphaned",
                                            "input": {"entered": str(entered), "marker": str(marker)}})
    wait_for(entered.exists, what="the handler to be in flight")
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    first.client.close()
    done = subprocess.run([sys.executable, "-m", "cli", "start", "nobody-has-it", "--id", "homeless", "--db", db],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

    second = Server(db, tmp_path / "second.log", "--workers", "0")
    refusals = Refusals()
    refusals.expected.add(422)
    pages = _watched(browser, second, refusals)
    page = next(pages)
    try:
        page.goto(second.url + "/")
        row = page.locator('tr[data-id="orphaned"]')
        expect(row.locator(".status")).to_have_text("running")
        expect(row.locator(".owner-gone")).to_have_text("owner gone")
        expect(page.locator('tr[data-id="homeless"] .owner-gone')).to_have_count(0)

        page.goto(second.url + "/i/homeless")
        page.click("#resume")
        note = page.locator("#action-note")
        expect(note).to_contain_text("HandlerNotRegistered")
        expect(note).to_have_class("note failed")
        expect(note).to_have_attribute("role", "alert")
        assert note.evaluate("n => getComputedStyle(n).color") != page.locator("p.muted, .muted").first.evaluate(
            "n => getComputedStyle(n).color")
        next(pages, None)
    finally:
        page.close()
        second.stop()


def test_the_handler_box_finds_a_target_by_what_the_list_shows(browser, tmp_path):  # noqa: F811
    from pathlib import Path

    target = f"{Path(__file__).parent / 'serve_agents.py'}:echo"
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log", handlers=(target,), agents=None)
    pages = _watched(browser, s, Refusals())
    page = next(pages)
    try:
        s.client.post("/invocations", json={"handler": target, "input": "by path", "id": "by-path"})
        _finished(s, "by-path")
        page.goto(s.url + "/")
        shown = page.locator('tr[data-id="by-path"] td.mono')
        expect(shown).to_have_text("serve_agents.py:echo")
        page.fill("#filter-handler", shown.inner_text())
        page.click("#search button[type=submit]")
        expect(page.locator("#invocations tbody tr[data-id]")).to_have_count(1)
        expect(page.locator('tr[data-id="by-path"]')).to_be_visible()
        next(pages, None)
    finally:
        page.close()
        s.stop()
