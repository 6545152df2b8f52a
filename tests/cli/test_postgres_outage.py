"""What a user sees of a PostgreSQL server that is away: a one-shot command waits for it
(up to 30 s, `JOURNAL_RECONNECT_FOR`), then exits 1 naming the URL without its
password; `journal serve` answers 503 meanwhile and goes on when the server is back."""

from __future__ import annotations

import subprocess
import sys

import httpx

from bench.pgserver import free_port

from ..waiting import Lines, wait_until
from .serving import Server


def _journal(*args: str, env: dict[str, str] | None = None, cwd=None) -> subprocess.Popen[str]:
    import os

    return subprocess.Popen([sys.executable, "-m", "cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})}, cwd=cwd)


def test_a_one_shot_command_waits_for_the_database_and_goes_on_when_it_is_back(servers):
    server = servers()
    url = server.new_database()
    server.stop_server()
    listing = _journal("ls", "--json", "--db", url)
    err = Lines(listing.stderr)
    # One line says what it is waiting for (and nothing else: no traceback, no exit).
    err.wait_for("cannot be reached")
    assert listing.poll() is None
    server.start_again()
    out, _ = listing.communicate(timeout=60)
    assert listing.returncode == 0 and out.strip() == "[]"
    assert "Traceback" not in err.text()


def test_a_one_shot_command_gives_up_naming_the_url_without_its_password():
    url = f"postgresql://journal:s3cret@127.0.0.1:{free_port()}/jobs"  # nothing listens there
    for args in (("ls",), ("start", "hello", "--input", '"ann"')):
        done = subprocess.run([sys.executable, "-m", "cli", *args, "--db", url], capture_output=True, text=True,
                              timeout=60, env={**__import__("os").environ, "JOURNAL_RECONNECT_FOR": "1"})
        assert done.returncode == 1, done.stderr
        assert f"cannot reach the journal store at postgresql://journal:***@127.0.0.1:{url.rsplit(':', 1)[1]}" \
            in done.stderr, done.stderr
        assert "s3cret" not in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert "pg_isready" in done.stderr  # what to check


def test_serve_answers_503_while_the_database_is_away_and_goes_on_once_it_is_back(servers, tmp_path):
    server = servers()
    url = server.new_database()
    serve = Server(url, tmp_path / "serve.log", "--workers", "2")
    try:
        assert serve.client.get("/invocations").status_code == 200
        server.stop_server("immediate")

        def unavailable() -> httpx.Response | None:
            answer = serve.client.get("/invocations")
            return answer if answer.status_code == 503 else None

        answer = wait_until(unavailable, "the API to answer 503")
        error = answer.json()["error"]
        assert error["type"] == "StoreUnavailable" and "cannot reach the journal store at" in error["message"]
        assert answer.headers["retry-after"] == "1"
        assert serve.client.get("/healthz").status_code == 503
        assert serve.proc.poll() is None
        server.start_again()
        wait_until(lambda: serve.client.get("/invocations").status_code == 200, "the API to answer again")
        started = serve.client.post("/invocations", json={"handler": "echo", "input": "back", "id": "e1"})
        assert started.status_code == 201, started.text
        assert serve.wait_status("e1", "completed")["result"] == "back"
    finally:
        code = serve.stop()
    output = serve.output()
    assert code == 0, output
    assert "Traceback" not in output and "cannot be reached" in output and "reachable again" in output, output


def test_serve_started_while_the_database_is_away_answers_503_then_serves(servers, tmp_path):
    server = servers()
    url = server.new_database()
    server.stop_server()
    serve = Server(url, tmp_path / "serve.log", "--workers", "1", ready=False)
    try:
        def answer() -> httpx.Response | None:
            try:
                return serve.client.get("/healthz")
            except httpx.TransportError:
                return None

        waiting = wait_until(answer, "the API to answer")
        assert waiting.status_code == 503 and waiting.json()["error"]["type"] == "StoreUnavailable"
        assert "postgresql" not in waiting.text  # nothing of the store, to a caller without the token
        server.start_again()
        wait_until(lambda: serve.client.get("/healthz").status_code == 200, "the API to serve")
        started = serve.client.post("/invocations", json={"handler": "echo", "input": "late", "id": "e2"})
        assert started.status_code == 201, started.text
        assert serve.wait_status("e2", "completed")["result"] == "late"
    finally:
        code = serve.stop()
    output = serve.output()
    assert code == 0 and "Traceback" not in output, output
