"""The events stream resumes after the last event a client saw (`Last-Event-ID`, `?after=`):
nothing lost, nothing repeated; in headless Chromium, the console's live view goes on by
itself after the server is killed and restarted mid-answer. On LMDB and on PostgreSQL, both
of which keep a running step's chunks for a follower that comes back."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from ..conftest import store_target
from .serving import AGENTS, Server


def _events(client: httpx.Client, path: str, *, headers: dict | None = None, stop_after: int | None = None,
            until: str = "end") -> list[tuple[str | None, str, dict]]:
    """`(id, name, data)` of each event, until `until` (or `stop_after` events: a cut connection)."""
    out: list[tuple[str | None, str, dict]] = []
    with client.stream("GET", path, headers=headers or {}, timeout=30) as response:
        assert response.status_code == 200
        block: dict[str, str] = {}
        for line in response.iter_lines():
            if line:
                key, _, value = line.partition(": ")
                block[key] = value
                continue
            if not block:
                continue
            out.append((block.get("id"), block["event"], json.loads(block["data"])))
            block = {}
            if out[-1][1] == until or (stop_after is not None and len(out) >= stop_after):
                break
    return out


@pytest.fixture
def server(tmp_path):
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log")
    yield s
    s.stop()


def test_a_reconnection_after_an_entry_gets_every_later_entry_once(server):
    server.client.post("/invocations", json={"handler": "planned", "input": "x", "id": "p"})
    server.wait_status("p", "completed")
    whole = _events(server.client, "/invocations/p/events")
    entries = [data["seq"] for _, name, data in whole if name == "entry"]
    assert len(entries) >= 3 and all(event_id for event_id, name, _ in whole if name == "entry")
    cut = next(i for i, (_, name, _) in enumerate(whole) if name == "entry")  # after the first entry
    last_id = whole[cut][0]
    for headers, path in (({"Last-Event-ID": last_id}, "/invocations/p/events"),
                          ({}, f"/invocations/p/events?after={last_id}")):
        rest = _events(server.client, path, headers=headers)
        assert [data["seq"] for _, name, data in rest if name == "entry"] == entries[1:]
        assert rest[-1][1] == "end"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _halves_input(tmp_path, first, second):
    return {"first": first, "second": second, "half": str(tmp_path / "half"), "release": str(tmp_path / "release")}


@pytest.mark.parametrize("kind", ["lmdb", "postgres"])
def test_chunks_resume_after_the_last_one_seen_while_the_step_runs_on_in_a_worker(tmp_path, request, kind):
    db = store_target(kind, request, tmp_path)
    worker = subprocess.Popen([sys.executable, "-m", "cli", "worker", "--db", db, "--handler",
                               f"halves={AGENTS}:halves"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Server(db, tmp_path / "serve.log", "--workers", "0")
    try:
        first, second = ["one ", "two ", "three "], ["four ", "five"]
        server.client.post("/invocations", json={"handler": "halves", "id": "h",
                                                 "input": _halves_input(tmp_path, first, second)})
        seen = _events(server.client, "/invocations/h/events", until="chunk", stop_after=None)
        while sum(1 for _, name, _ in seen if name == "chunk") < len(first):
            seen += _events(server.client, "/invocations/h/events",
                            headers={"Last-Event-ID": next(i for i, _, _ in reversed(seen) if i)}, until="chunk")
        last_id = next(i for i, _, _ in reversed(seen) if i)
        (tmp_path / "half").touch()
        rest = _events(server.client, "/invocations/h/events", headers={"Last-Event-ID": last_id},
                       until="chunk", stop_after=None)
        chunks = [d["data"] for _, name, d in seen + rest if name == "chunk"]
        while len(chunks) < len(first + second):
            rest += _events(server.client, "/invocations/h/events",
                            headers={"Last-Event-ID": next(i for i, _, _ in reversed(rest) if i)}, until="chunk")
            chunks = [d["data"] for _, name, d in seen + rest if name == "chunk"]
        assert chunks == first + second  # every word once, in order, across three connections
        (tmp_path / "release").touch()
        assert server.client.get("/invocations/h/result", params={"wait": 30}).json()["result"] == "".join(
            first + second)
    finally:
        server.stop()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)


@pytest.mark.parametrize("kind", ["lmdb", "postgres"])
def test_the_console_shows_the_whole_answer_once_after_the_server_is_killed_and_restarted(tmp_path, request, kind):
    from playwright.sync_api import expect, sync_playwright

    from .test_serve_ui import CHROMIUM, HOSTILE  # (skips with it where there is no browser)

    db, port = store_target(kind, request, tmp_path), _free_port()
    worker = subprocess.Popen([sys.executable, "-m", "cli", "worker", "--db", db, "--handler",
                               f"halves={AGENTS}:halves"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Server(db, tmp_path / "serve.log", "--workers", "0", http=f"127.0.0.1:{port}")
    first, second = ["The ", "answer ", HOSTILE], [" is ", "42."]
    try:
        server.client.post("/invocations", json={"handler": "halves", "id": "cut",
                                                 "input": _halves_input(tmp_path, first, second)})
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                        args=["--headless", "--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            page.goto(server.url + "/i/cut")
            output = page.locator('#timeline tr[data-kind="running"] pre.live-output')
            expect(output).to_have_text("".join(first), timeout=20000)
            server.proc.send_signal(signal.SIGKILL)  # the connection is cut mid-answer
            server.stop()
            (tmp_path / "half").touch()  # the step goes on in the worker meanwhile
            server = Server(db, tmp_path / "serve-2.log", "--workers", "0", http=f"127.0.0.1:{port}")
            expect(output).to_have_text("".join(first + second), timeout=20000)  # once: nothing doubled
            (tmp_path / "release").touch()
            expect(page.locator('#timeline tr[data-kind="running"]')).to_have_count(0, timeout=20000)
            expect(page.locator('#timeline tr[data-kind="step"] pre.value')).to_have_text("".join(first + second))
            assert page.locator("img").count() == 0
            browser.close()
    finally:
        server.stop()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
