"""Live output of running steps as the CLI and the HTTP service show it: `event: chunk` on the
events stream of `journal serve`, and chunk lines from `journal tail -f`, sent by a step
running in another process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..waiting import Lines, wait_until
from .serving import Server

ROOT = Path(__file__).resolve().parent.parent.parent
STREAMING = ROOT / "tests" / "runtime" / "streaming_agents.py"

EMITTER = textwrap.dedent("""
    import sys, json, anyio
    from runtime import Engine
    from tests.runtime.streaming_agents import streamer
    async def main():
        db, inv, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
        async with Engine.open(db) as engine:
            print((await engine.run(streamer, args, id=inv)).status, flush=True)
    anyio.run(main)
""")


def _emitter(db: str, inv: str, args: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", EMITTER, db, inv, json.dumps(args)],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, stdout=subprocess.PIPE, text=True)


@pytest.fixture(params=["lmdb", "postgres"])
def store_url(request, tmp_path):
    return request.getfixturevalue("postgres_url") if request.param == "postgres" else str(tmp_path / "db")


def _create(db: str, inv: str, args: dict) -> None:
    import anyio

    from runtime import Engine
    from tests.runtime.streaming_agents import streamer

    async def main() -> None:
        async with Engine.open(db) as engine:
            await engine.start(streamer, args, id=inv)

    anyio.run(main)


def _listening(url: str) -> bool:
    if not url.startswith("postgresql://"):
        return True
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN journal_live_%'").fetchone()
    return bool(row and row[0])


def _stop(*procs: subprocess.Popen | None) -> None:
    for p in procs:
        if p is not None:
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()


def test_an_sse_client_of_serve_gets_the_chunks_in_order_before_the_steps_entry(store_url, tmp_path):
    args = {"chunks": 5, "release": str(tmp_path / "release")}
    _create(store_url, "sse", args)
    # The server only follows (no workers): the step runs in a process of its own.
    server = Server(store_url, tmp_path / "serve.log", "--workers", "0",
                    handlers=(f"stream={STREAMING}:streamer",), agents=None)
    proc = None
    try:
        events: list[tuple[str, dict]] = []
        with server.client.stream("GET", "/invocations/sse/events") as response:
            name = None
            lines = response.iter_lines()
            for line in lines:
                if line.startswith("event: "):
                    name = line[len("event: "):]
                elif line.startswith("data: "):
                    events.append((name, json.loads(line[len("data: "):])))
                    if name == "status" and proc is None:  # the stream is open: its follower listens
                        wait_until(lambda: _listening(store_url), "the server to listen")
                        proc = _emitter(store_url, "sse", args)
                    if name == "chunk" and sum(n == "chunk" for n, _ in events) == 5:
                        break
            step_entries = [d for n, d in events if n == "entry" and d["name"] == "answer"]
            assert not step_entries  # five chunks arrived while the step still ran
            (tmp_path / "release").touch()
            for line in lines:
                if line.startswith("event: "):
                    name = line[len("event: "):]
                elif line.startswith("data: "):
                    events.append((name, json.loads(line[len("data: "):])))
        assert proc is not None and proc.communicate(timeout=60)[0].strip() == "completed"
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
        server.stop()
    chunks = [data for name, data in events if name == "chunk"]
    assert chunks == [{"seq": 2, "attempt": 1, "index": n, "data": f"token-{n} "} for n in range(5)]
    names = [(name, data.get("name")) for name, data in events if name in ("chunk", "entry")]
    assert names.index(("entry", "answer")) > max(i for i, (n, _) in enumerate(names) if n == "chunk")
    assert events[-1][0] == "end" and events[-1][1]["status"] == "completed"


def test_tail_follow_prints_the_running_steps_chunks(sh, db, tmp_path):
    args = {"chunks": 3, "release": str(tmp_path / "release")}
    _create(db, "t", args)
    tail = subprocess.Popen(sh.argv("tail", "t", "-f"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=sh.env)
    proc = None
    try:
        out = Lines(tail.stdout)
        out.wait_for("started")
        proc = _emitter(db, "t", args)
        line = out.wait_for("token-2")
        assert "chunk" in line and "attempt 1" in line
        (tmp_path / "release").touch()
        assert proc.communicate(timeout=60)[0].strip() == "completed"
        assert tail.wait(timeout=60) == 0
        text = out.text()
    finally:
        _stop(proc, tail)
    lines = text.splitlines()
    chunk_lines = [line for line in lines if " chunk " in line]
    assert [line.split()[-1] for line in chunk_lines] == ["token-0", "token-1", "token-2"]
    answer = next(i for i, line in enumerate(lines) if "answer" in line and " step " in line)
    assert answer > max(lines.index(line) for line in chunk_lines)  # the chunks before the step's entry


def test_tail_json_gives_each_chunk_as_an_object(sh, db, tmp_path):
    args = {"chunks": 2, "release": str(tmp_path / "release")}
    _create(db, "j", args)
    tail = subprocess.Popen(sh.argv("tail", "j", "-f", "--json"), stdout=subprocess.PIPE, text=True, env=sh.env)
    proc = None
    try:
        out = Lines(tail.stdout)
        out.wait_for('"started"')
        proc = _emitter(db, "j", args)
        out.wait_for("token-1")
        (tmp_path / "release").touch()
        assert proc.communicate(timeout=60)[0].strip() == "completed"
        assert tail.wait(timeout=60) == 0
        docs = [json.loads(line) for line in out.text().splitlines()]
    finally:
        _stop(proc, tail)
    assert [{k: v for k, v in d.items() if k != "cursor"} for d in docs if d["kind"] == "chunk"] == [
        {"kind": "chunk", "seq": 2, "attempt": 1, "index": n, "data": f"token-{n} "} for n in range(2)]
    assert all(d["cursor"] for d in docs)  # where a follower cut off after it goes on
    assert docs[-1]["kind"] == "completed"


HALVES = EMITTER.replace("import streamer", "import two_halves").replace("engine.run(streamer", "engine.run(two_halves")


def test_tail_after_the_cursor_of_its_last_line_prints_nothing_twice(sh, store_url, tmp_path):
    """A follower cut off mid-answer (`tail -f --json` killed after the chunk "c ") goes on
    with `--after` that line's cursor: the chunks and entries it printed do not come again,
    though the running step's chunks are still kept for late followers."""
    import anyio

    from runtime import Engine
    from tests.runtime.streaming_agents import two_halves

    args = {"half": str(tmp_path / "half"), "release": str(tmp_path / "release")}

    async def create() -> None:
        async with Engine.open(store_url) as engine:
            await engine.start(two_halves, args, id="t")

    anyio.run(create)
    def argv(*args: str) -> list[str]:
        return [sys.executable, "-m", "cli", "tail", "t", "-f", "--json", *args, "--db", store_url]

    first = subprocess.Popen(argv(), stdout=subprocess.PIPE, text=True, env=sh.env)
    proc = subprocess.Popen([sys.executable, "-c", HALVES, store_url, "t", json.dumps(args)],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, stdout=subprocess.PIPE, text=True)
    second = None
    try:
        out = Lines(first.stdout)
        out.wait_for('"data":"c "')
        _stop(first)  # the connection is cut
        seen = [json.loads(line) for line in out.text().splitlines()]
        (tmp_path / "half").touch()
        second = subprocess.Popen(argv("--after", seen[-1]["cursor"]), stdout=subprocess.PIPE, text=True, env=sh.env)
        rest_out = Lines(second.stdout)
        rest_out.wait_for('"data":"e "')
        (tmp_path / "release").touch()
        assert proc.communicate(timeout=60)[0].strip() == "completed"
        assert second.wait(timeout=60) == 0
        rest = [json.loads(line) for line in rest_out.text().splitlines()]
    finally:
        _stop(proc, first, second)
    chunks = [(d["data"]) for d in seen + rest if d["kind"] == "chunk"]
    assert chunks == ["a ", "b ", "c ", "d ", "e "]  # each once, in order
    # Each entry once: started, emitted, the step, completed (the first follower may have
    # been cut off before it read the emitted entry: chunks wake it, the journal is polled).
    assert [d["seq"] for d in seen + rest if d["kind"] != "chunk"] == [0, 1, 2, 3]
    assert [d["kind"] for d in rest if d["kind"] != "chunk"][-2:] == ["step", "completed"]


def test_tail_after_something_that_is_no_position_exits_2(sh, db):
    result = subprocess.run(sh.argv("tail", "x", "--after", "nonsense"), capture_output=True, text=True, env=sh.env)
    assert result.returncode == 2
    assert "neither an entry's seq nor a cursor" in result.stderr
