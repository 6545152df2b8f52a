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
    assert [d for d in docs if d["kind"] == "chunk"] == [
        {"kind": "chunk", "seq": 2, "attempt": 1, "index": n, "data": f"token-{n} "} for n in range(2)]
    assert docs[-1]["kind"] == "completed"
