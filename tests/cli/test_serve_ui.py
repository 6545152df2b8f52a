"""The web UI of `journal serve` in a real headless Chromium (Debian's `chromium`, driven by
Playwright). With CI=true these tests run, never skip: .ci/run installs the browser."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .serving import Server

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# docs/img/ui.png is this test's screenshot; JOURNAL_UPDATE_SCREENSHOT=1 writes it again
# (otherwise the shot goes to a temporary directory, so a test run leaves the docs alone).
DOCS_SCREENSHOT = Path(__file__).parents[2] / "docs" / "img" / "ui.png"
HOSTILE = '<img src=x onerror="window.__pwned = 1"><script>window.__pwned = 2</script>'

if not os.path.exists(CHROMIUM):
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"the browser tests need Debian's chromium at {CHROMIUM}: apt-get install -y chromium")
    pytest.skip("chromium is not installed (apt-get install -y chromium); CI runs these", allow_module_level=True)

playwright = pytest.importorskip("playwright.sync_api") if os.environ.get("CI") != "true" else None
from playwright.sync_api import expect, sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        # A persistent context gives Chromium a fresh profile directory of our own.
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, viewport={"width": 1200, "height": 800},
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        yield context
        context.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    s = Server(str(tmp / "db"), tmp / "serve.log")
    yield s
    s.stop()


@pytest.fixture
def page(browser, server):
    page = browser.new_page()
    outside: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(server.url) else outside.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    page.close()
    assert outside == [], f"the UI loaded something from outside the server: {outside}"
    assert errors == [], f"the page reported errors: {errors}"


def test_the_list_shows_a_new_invocation(page, server):
    page.goto(server.url + "/")
    expect(page.locator("#invocations")).to_be_visible()
    server.client.post("/invocations", json={"handler": "echo", "input": "fresh", "id": "list-me"})
    row = page.locator('tr[data-id="list-me"]')
    expect(row).to_be_visible(timeout=15000)
    expect(row.locator(".status")).to_have_text("completed", timeout=15000)
    page.locator('button[data-filter="suspended"]').click()
    expect(page.locator('tr[data-id="list-me"]')).to_have_count(0)
    page.locator('button[data-filter="completed"]').click()
    expect(page.locator('tr[data-id="list-me"]')).to_be_visible()


def test_the_home_shows_the_queue_at_a_glance_and_filters_by_tag(page, server):
    for n in range(3):
        server.client.post("/invocations", json={"handler": "echo", "input": f"t{n}", "id": f"tagged-{n}",
                                                 "tags": {"customer": "acme" if n < 2 else "globex"}})
        server.wait_status(f"tagged-{n}", "completed")
    page.goto(server.url + "/")
    completed = server.client.get("/invocations/summary").json()
    echo = next(row for row in completed["handlers"] if row["handler"] == "echo")
    cell = page.locator('#summary tr[data-handler="echo"] td[data-status="completed"]')
    expect(cell).to_have_text(str(echo["counts"]["completed"]), timeout=15000)
    page.locator("#filter-tag").fill("customer:acme")
    page.locator("#search button[type=submit]").click()
    expect(page.locator("#invocations tbody tr")).to_have_count(2, timeout=15000)
    expect(page.locator('tr[data-id="tagged-1"] td.tags')).to_have_text("customer=acme")
    page.locator('tr[data-id="tagged-1"] a.tag').click()  # a tag is a link to its invocations
    expect(page.locator('tr[data-id="tagged-0"]')).to_be_visible()
    assert "tag=customer%3Aacme" in page.url


def test_the_list_retries_the_failed_runs_it_shows_after_showing_the_checked_count(page, server):
    for n in range(2):
        server.client.post("/invocations", json={"handler": "approve", "input": {"order": f"B-{n}"}, "id": f"batch-{n}",
                                                 "tags": {"wave": "b"}})
        server.wait_status(f"batch-{n}", "suspended")
        server.client.post(f"/invocations/batch-{n}/promises/approval", json={"value": {"approved": False}})
        server.wait_status(f"batch-{n}", "failed")
    page.goto(server.url + "/?status=failed&tag=wave%3Ab")
    expect(page.locator("#invocations tbody tr")).to_have_count(2, timeout=15000)
    page.locator("#batch-retry").click()
    expect(page.locator("#batch-note")).to_contain_text("2 would be retried", timeout=20000)
    assert server.client.get("/invocations", params={"tag": "wave:b"}).json()["invocations"].__len__() == 2  # nothing yet
    page.locator("#batch-confirm").click()
    expect(page.locator("#batch-note")).to_contain_text("2 retried", timeout=20000)
    retried = server.client.get("/invocations", params={"tag": "wave:b"}).json()["invocations"]
    assert sorted(d["id"].split("-retry-")[0] for d in retried if "-retry-" in d["id"]) == ["batch-0", "batch-1"]


def test_clicking_through_shows_the_invocations_steps(page, server):
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "UI-7"}, "id": "click-me"})
    server.wait_status("click-me", "suspended")
    page.goto(server.url + "/")
    page.locator('tr[data-id="click-me"] a').click()
    page.wait_for_url("**/i/click-me")
    step = page.locator('#timeline tr[data-kind="step"]')
    expect(step).to_have_count(1)
    expect(step.locator("td.mono")).to_have_text("draft")
    expect(step.locator("pre.value")).to_have_text("refund for UI-7")
    expect(page.locator("#events li")).to_have_count(1)  # what ctx.emit published
    expect(page.locator("#status .status")).to_have_text("suspended")


def test_clicking_approve_completes_a_waiting_invocation(page, server, tmp_path):
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "UI-9"}, "id": "approve-me"})
    server.wait_status("approve-me", "suspended")
    page.goto(server.url + "/i/approve-me")
    card = page.locator('.promise[data-promise="approval"]')
    expect(card).to_be_visible()
    shot = DOCS_SCREENSHOT if os.environ.get("JOURNAL_UPDATE_SCREENSHOT") == "1" else tmp_path / "ui.png"
    assert page.screenshot(path=str(shot), full_page=True).startswith(b"\x89PNG")
    card.locator("button.approve").click()
    expect(page.locator("#status .status")).to_have_text("completed", timeout=20000)
    expect(page.locator("#result")).to_contain_text('"refunded"')
    # The steps that ran after the approval arrived live, over the event stream.
    expect(page.locator('#timeline tr[data-kind="step"]')).to_have_count(2)
    expect(page.locator('#timeline tr[data-kind="completed"]')).to_have_count(1)
    # The resume replayed the draft instead of running it again, and says so.
    expect(page.locator("#runs")).to_have_text("2 steps run live, 1 replayed")
    assert server.client.get("/invocations/approve-me/result").json()["result"]["status"] == "refunded"


def test_markup_in_a_value_renders_as_text(page, server):
    server.client.post("/invocations", json={"handler": "echo", "input": HOSTILE, "id": "hostile"})
    server.client.post("/invocations", json={"handler": "echo", "input": "k", "id": HOSTILE})
    server.wait_status("hostile", "completed")
    server.wait_status(HOSTILE, "completed")
    page.goto(server.url + "/i/hostile")
    expect(page.locator('#timeline tr[data-kind="step"] pre.value')).to_have_text(HOSTILE)
    expect(page.locator("#result")).to_have_text(HOSTILE)
    page.goto(server.url + "/")
    expect(page.locator("#invocations a", has_text="<img")).to_have_text(HOSTILE)
    assert page.locator("img").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_a_keys_state_and_queue(page, server):
    for n in range(2):
        server.client.post("/invocations", json={"handler": "remember", "input": f"turn {n}", "id": f"t{n}",
                                                 "key": "thread-1"})
        server.wait_status(f"t{n}", "completed")
    page.goto(server.url + "/i/t1")
    page.locator('a[href="/k/thread-1"]').click()
    rows = page.locator("#state tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("last")
    expect(rows.nth(0).locator("pre")).to_have_text("turn 1")
    expect(rows.nth(1).locator("pre")).to_have_text("2")


def test_a_diverged_invocation_shows_its_difference_and_the_fork_command(page, server, tmp_path):
    flag = tmp_path / "renamed"
    server.client.post("/invocations", json={"handler": "drifting", "input": str(flag), "id": "drifted"})
    server.wait_status("drifted", "suspended")
    flag.write_text("the step was renamed")
    server.client.post("/invocations/drifted/promises/approval", json={"value": True})
    server.wait_status("drifted", "diverged")
    page.goto(server.url + "/i/drifted")
    card = page.locator("#divergence")
    expect(card).to_contain_text("draft-v2")
    expect(page.locator("#fork-command")).to_have_text("journal fork drifted --at 1")


def test_a_step_that_needed_a_retry_shows_it_on_the_timeline(page, server, tmp_path):
    server.client.post("/invocations", json={"handler": "flaky", "input": str(tmp_path / "m"), "id": "flaky-1"})
    server.wait_status("flaky-1", "completed")
    page.goto(server.url + "/i/flaky-1")
    step = page.locator('#timeline tr[data-kind="step"]')
    expect(step.locator(".tag.retry")).to_have_text("1 retry")
    expect(step.locator("pre.value")).to_have_text("answered")


def test_a_running_steps_text_grows_live_and_gives_way_to_its_entry(page, server, tmp_path):
    release = tmp_path / "release"
    words = ["The ", "answer ", HOSTILE, " is 42."]
    server.client.post("/invocations", json={"handler": "stream", "id": "live-1",
                                             "input": {"words": words, "release": str(release)}})
    page.goto(server.url + "/i/live-1")
    running = page.locator('#timeline tr[data-kind="running"]')
    expect(running.locator("pre.live-output")).to_have_text("".join(words), timeout=15000)  # as text, not markup
    expect(running.locator(".tag.new")).to_have_text("live, attempt 1")
    assert page.evaluate("window.__pwned") is None
    release.touch()
    expect(running).to_have_count(0, timeout=15000)
    expect(page.locator('#timeline tr[data-kind="step"] pre.value')).to_have_text("".join(words))


_EVIL_PAGE = """<!doctype html><html><body><script>
const target = new URLSearchParams(location.search).get("target");
const plain = (path, body) => fetch(target + path, {method: "POST", mode: "no-cors", body: JSON.stringify(body),
                                                    headers: {"Content-Type": "text/plain"}});
const json = (path, body) => fetch(target + path, {method: "POST", body: JSON.stringify(body),
                                                   headers: {"Content-Type": "application/json"}});
const tries = [
  plain("/invocations", {handler: "echo", input: "evil", id: "evil-start"}),
  plain("/invocations/victim/promises/approval", {value: {approved: true, by: "evil"}}),
  plain("/invocations/victim/cancel", {}),
  fetch(target + "/invocations/victim/cancel", {method: "POST", mode: "no-cors"}),
  json("/invocations", {handler: "echo", input: "evil", id: "evil-json"}),
  json("/invocations/victim/promises/approval", {value: true}),
  json("/invocations/victim/cancel", {}),
];
Promise.allSettled(tries).then((results) => {
  document.title = "done " + results.map((r) => r.status).join(",");
});
</script></body></html>"""


@pytest.fixture
def other_origin():
    """A web page on another origin (127.0.0.2, another loopback address) that tries to act
    on the journal server, as any site open in the operator's browser could."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the standard library's name
            body = _EVIL_PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Page)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.2:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_a_page_from_another_origin_cannot_start_resolve_or_cancel_but_the_ui_can(browser, server, other_origin):
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "EVIL"}, "id": "victim"})
    server.wait_status("victim", "suspended")
    evil = browser.new_page()
    try:
        evil.goto(f"{other_origin}/?target={server.url}")
        evil.wait_for_function("document.title.startsWith('done')", timeout=20000)
    finally:
        evil.close()
    assert server.client.get("/invocations/evil-start").status_code == 404
    assert server.client.get("/invocations/evil-json").status_code == 404
    doc = server.status("victim")
    assert doc["status"] == "suspended" and doc["waiting_on"] == [{"kind": "promise", "name": "approval"}]
    kinds = [e["kind"] for e in server.client.get("/invocations/victim/entries").json()["entries"]]
    assert "promise" not in kinds and "cancel_received" not in kinds

    page = browser.new_page()
    try:
        page.goto(server.url + "/i/victim")
        page.locator('.promise[data-promise="approval"] button.approve').click()
        expect(page.locator("#status .status")).to_have_text("completed", timeout=20000)
    finally:
        page.close()


def test_the_schedules_page_lists_pauses_with_a_note_resumes_triggers_and_backfills(page, server):
    c = server.client
    assert c.put("/schedules/nightly-ui", json={"target": "echo", "cron": "0 3 * * *", "input": HOSTILE}).status_code == 201
    first = c.post("/schedules/nightly-ui/trigger").json()["id"]
    server.wait_status(first, "completed")
    page.goto(server.url + "/s")
    row = page.locator('tr[data-schedule="nightly-ui"]')
    expect(row).to_be_visible()
    expect(row.locator("td.next")).not_to_have_text("none")
    expect(row.get_by_role("link", name=first)).to_be_visible()
    expect(row.locator(".status")).to_have_text("completed")
    row.locator('button[data-action="pause"]').click()
    page.locator("#pause-note").fill("provider outage")
    page.locator("#pause-form button[type=submit]").click()
    expect(row.locator(".paused")).to_be_visible()
    expect(row.locator("td.next")).to_contain_text("provider outage")
    assert c.get("/schedules/nightly-ui").json()["note"] == "provider outage"
    row.locator('button[data-action="resume"]').click()
    expect(row.locator('button[data-action="pause"]')).to_be_visible()
    assert c.get("/schedules/nightly-ui").json()["paused"] is False
    row.locator('button[data-action="trigger"]').click()
    expect(row.locator("td.recent a")).to_have_count(2)
    row.locator('button[data-action="backfill"]').click()
    page.locator("#backfill-from").fill("2026-01-01T00:00")
    page.locator("#backfill-to").fill("2026-01-03T00:00")
    page.locator("#backfill-form button[type=submit]").click()
    expect(page.locator("#backfill-result li")).to_have_count(2)
    expect(page.locator("#backfill-result li").first).to_contain_text("started")
    # An invocation a schedule started links back to it.
    page.goto(server.url + "/i/" + first)
    page.locator('#facts a[data-schedule="nightly-ui"]').click()
    expect(page).to_have_url(server.url + "/s#nightly-ui")
    expect(page.locator("tr.chosen")).to_have_attribute("data-schedule", "nightly-ui")
    assert page.evaluate("window.__pwned") is None


def test_published_values_show_and_update_live(page, server):
    server.client.post("/invocations", json={"handler": "talk", "input": "hi", "id": "talking"})
    server.wait_status("talking", "suspended")
    page.goto(server.url + "/i/talking")
    value = page.locator('#published dd[data-name="count"] pre')
    expect(value).to_have_text("0")
    for n, word in enumerate(["one", HOSTILE], start=1):
        assert server.client.post("/invocations/talking/messages/chat", json={"value": word}).status_code == 202
        expect(value).to_have_text(str(n), timeout=20000)  # the page follows the journal as it grows
    expect(page.locator('#timeline tr[data-kind="received"]')).to_have_count(2, timeout=20000)
    assert page.locator("img").count() == 0
