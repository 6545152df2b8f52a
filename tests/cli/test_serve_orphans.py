"""`journal serve` takes `[NAME=]TARGET` like `journal worker`: given the code for a path that
`journal run` recorded, it runs that run's orphan (its process killed mid-step) from the
console's Resume button and by itself; a server without the code says in its hint the option
that gives it, and a server started with exactly that option takes the orphan over."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .serving import Server, wait_for
from .test_serve_console import Refusals, _watched
from .test_serve_ui import browser, expect  # noqa: F401

AGENTS = Path(__file__).parent / "serve_agents.py"


def _orphan(db: str, tmp_path: Path, invocation_id: str) -> Path:
    """`journal run serve_agents.py:gate` killed while its handler waits: running, owner gone.
    Returns the file that lets the handler go on."""
    entered, marker = tmp_path / f"{invocation_id}.entered", tmp_path / f"{invocation_id}.go"
    args = json.dumps({"entered": str(entered), "marker": str(marker)})
    proc = subprocess.Popen([sys.executable, "-m", "cli", "run", f"{AGENTS}:gate", "--input", args, "--id",
                             invocation_id, "--db", db], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(entered.exists, what="the handler to be in flight")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return marker


def test_serve_accepts_a_bare_target_and_takes_the_orphans_of_its_path_over_by_itself(tmp_path):
    db = str(tmp_path / "db")
    _orphan(db, tmp_path, "by-itself").write_text("go")
    server = Server(db, tmp_path / "serve.log", handlers=(f"{AGENTS}:gate",), agents=None)
    try:
        done = server.wait_status("by-itself", "completed", timeout=30)
        assert server.client.get("/invocations/by-itself/result").json()["result"] == "after"
        assert done["handler"] == f"{AGENTS}:gate"
    finally:
        server.stop()


def test_the_resume_button_takes_an_orphan_over_and_the_hint_of_a_server_without_its_code_works(browser, tmp_path):  # noqa: F811
    db = str(tmp_path / "db")
    _orphan(db, tmp_path, "clicked").write_text("go")
    _orphan(db, tmp_path, "hinted").write_text("go")

    # A server without the code: Resume answers 422 with the option that gives it.
    without = Server(db, tmp_path / "without.log", "--workers", "0")
    refusals = Refusals()
    refusals.expected.add(422)
    pages = _watched(browser, without, refusals)
    page = next(pages)
    try:
        page.goto(without.url + "/i/hinted")
        expect(page.locator("#owner-gone")).to_be_visible()
        page.click("#resume")
        note = page.locator("#action-note")
        expect(note).to_contain_text("HandlerNotRegistered")
        hint = re.search(r"start the server with --handler (\S+) ", note.inner_text())
        assert hint is not None, note.inner_text()
        assert "=TARGET" not in note.inner_text()
        next(pages, None)
    finally:
        page.close()
        without.stop()

    # With exactly that option: Resume takes one over, and its workers the other by themselves.
    suggested = hint.group(1)
    button = Server(db, tmp_path / "button.log", "--workers", "0", handlers=(suggested,), agents=None)
    pages = _watched(browser, button, Refusals())
    page = next(pages)
    try:
        page.goto(button.url + "/i/clicked")
        expect(page.locator("#owner-gone")).to_be_visible()
        page.click("#resume")
        expect(page.locator("#status .status")).to_have_text("completed", timeout=20000)
        expect(page.locator("#result")).to_have_text("after")
        next(pages, None)
    finally:
        page.close()
        button.stop()
    worker = Server(db, tmp_path / "worker.log", handlers=(suggested,), agents=None)
    try:
        worker.wait_status("hinted", "completed", timeout=30)
    finally:
        worker.stop()


@pytest.mark.parametrize("spec", ["a:b=x.py:f", "=x.py:f"])
def test_serve_still_refuses_a_malformed_handler(spec, tmp_path):
    done = subprocess.run([sys.executable, "-m", "cli", "serve", "--db", str(tmp_path / "db"), "--handler", spec],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--handler" in done.stderr
