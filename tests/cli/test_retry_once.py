"""A failed invocation is retried once: a second retry while the first is running or done is
refused (409 naming it, exit 2) unless forced; the original lists its retries and shows it
was retried (`ls`, the console); a retried step keeps the idempotency key of the step it
retries. Over HTTP on both stores, the command line, and the console in Chromium."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from ..conftest import store_target
from .serving import Server
from .test_serve_console import Refusals, _watched
from .test_serve_ui import browser, expect  # noqa: F401


def _failed(server, invocation_id, args):
    server.client.post("/invocations", json={"handler": "keyed", "input": args, "id": invocation_id})
    done = server.client.get(f"/invocations/{invocation_id}/result", params={"wait": 20}).json()
    assert done["status"] == "failed", done


@pytest.mark.parametrize("kind", ["lmdb", "postgres"])
def test_a_second_retry_is_refused_naming_the_first_and_the_original_links_to_it(kind, request, tmp_path):
    server = Server(store_target(kind, request, tmp_path), tmp_path / "serve.log")
    log, marker = tmp_path / "keys.log", tmp_path / "fixed"
    try:
        _failed(server, "pay-8", {"log": str(log), "marker": str(marker)})
        marker.write_text("the service is back")
        # A double click: two requests at once make one retry.
        answers: list = []
        clicks = [threading.Thread(target=lambda: answers.append(server.client.post("/invocations/pay-8/retry")))
                  for _ in range(2)]
        for t in clicks:
            t.start()
        for t in clicks:
            t.join()
        assert sorted(a.status_code for a in answers) == [201, 409], [a.text for a in answers]
        made = next(a.json() for a in answers if a.status_code == 201)
        refused = next(a.json() for a in answers if a.status_code == 409)
        assert made["id"] == "pay-8-retry-1"
        assert refused["error"]["type"] == "AlreadyRetried" and refused["id"] == "pay-8-retry-1"
        assert server.client.get("/invocations/pay-8-retry-1/result", params={"wait": 20}).json()["status"] == "completed"

        again = server.client.post("/invocations/pay-8/retry")
        assert again.status_code == 409
        assert "pay-8-retry-1" in again.json()["error"]["message"] and '"force": true' in again.json()["error"]["message"]
        assert again.json()["status"] == "completed"
        doc = server.status("pay-8")
        assert doc["status"] == "failed" and doc["retries"] == [{"id": "pay-8-retry-1", "status": "completed"}]
        (listed,) = server.client.get("/invocations", params={"status": "failed"}).json()["invocations"]
        assert listed["id"] == "pay-8" and listed["retries"] == [{"id": "pay-8-retry-1", "status": "completed"}]
        assert "retries" not in server.status("pay-8-retry-1")  # only a failed invocation has them

        forced = server.client.post("/invocations/pay-8/retry", json={"force": True})
        assert forced.status_code == 201 and forced.json()["id"] == "pay-8-retry-2"
        server.client.get("/invocations/pay-8-retry-2/result", params={"wait": 20})
        # The charge was called three times, always with the same idempotency key: a provider
        # that honours it charges once.
        keys = log.read_text().splitlines()
        assert len(keys) == 3 and len(set(keys)) == 1 and keys[0].startswith("pay-8:"), keys
    finally:
        server.stop()


def test_journal_retry_twice_is_refused_and_ls_marks_the_retried(sh, tmp_path):
    agents = Path(__file__).parent / "serve_agents.py"
    args = json.dumps({"log": str(tmp_path / "keys.log"), "marker": str(tmp_path / "fixed")})
    assert sh("run", f"{agents}:keyed_charge", "--input", args, "--id", "cli-pay").returncode == 1
    (tmp_path / "fixed").write_text("back")
    first = sh("retry", "cli-pay")
    assert first.returncode == 0, first.stderr
    second = sh("retry", "cli-pay")
    assert second.returncode == 2
    assert "cli-pay-retry-1" in second.stderr and "--force" in second.stderr
    listed = sh("ls", "--status", "failed")
    assert "cli-pay" in listed.stdout and "retried as cli-pay-retry-1" in listed.stdout, listed.stdout
    (row,) = json.loads(sh("ls", "--status", "failed", "--json").stdout)
    assert row["retries"] == [{"id": "cli-pay-retry-1", "status": "completed"}]
    assert "cli-pay-retry-1 (completed)" in sh("show", "cli-pay").stdout
    forced = sh("retry", "cli-pay", "--force", "--no-run")
    assert forced.returncode == 0 and forced.stdout.strip() == "cli-pay-retry-2", forced.stderr
    keys = (tmp_path / "keys.log").read_text().splitlines()
    assert len(keys) == 2 and keys[0] == keys[1]


def test_the_console_shows_a_retried_invocation_and_offers_no_second_retry(browser, tmp_path):  # noqa: F811
    server = Server(str(tmp_path / "db"), tmp_path / "serve.log")
    pages = _watched(browser, server, Refusals())
    page = next(pages)
    try:
        marker = tmp_path / "fixed"
        _failed(server, "ui-pay", {"log": str(tmp_path / "keys.log"), "marker": str(marker)})
        marker.write_text("back")
        page.goto(server.url + "/i/ui-pay")
        page.click("#retry")
        page.wait_for_url("**/i/ui-pay-retry-1")
        expect(page.locator("#status .status")).to_have_text("completed", timeout=20000)
        page.goto(server.url + "/i/ui-pay")
        expect(page.locator("#retries a")).to_have_text("ui-pay-retry-1")
        expect(page.locator("#retry")).to_have_count(0)
        page.goto(server.url + "/?status=failed")
        expect(page.locator('tr[data-id="ui-pay"] .tag.retried')).to_have_text("retried")
        next(pages, None)
    finally:
        page.close()
        server.stop()
