"""Live output from steps (`current_step().emit`): what followers in other processes receive,
and what the journal does not (no entry per chunk, nothing of it on replay)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap

import anyio
import msgspec
import pytest

from journal import Chunk, LiveFeed, open_store
from runtime import Engine, current_context, current_step

from ..waiting import until, wait_until
from .streaming_agents import binary_streamer, flaky_streamer, streamer, two_halves

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EMITTER = textwrap.dedent("""
    import sys, json, anyio
    from runtime import Engine
    from tests.runtime.streaming_agents import streamer
    async def main():
        db, inv, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
        async with Engine.open(db) as engine:
            out = await engine.resume(inv) if args.get("resume") else await engine.run(streamer, args, id=inv)
            print(out.status, flush=True)
    anyio.run(main)
""")


def _emitter(db: str, inv: str, args: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", EMITTER, db, inv, json.dumps(args)],
                            env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT, stdout=subprocess.PIPE, text=True)


@pytest.fixture(params=["lmdb", "postgres"])
def store_url(request, tmp_path):
    return request.getfixturevalue("postgres_url") if request.param == "postgres" else str(tmp_path / "db")


def _listening(url: str) -> bool:
    """Whether some session listens to a live-output channel (a follower on PostgreSQL is ready)."""
    if not url.startswith("postgresql://"):
        return True  # LMDB keeps a running step's chunks: a follower that starts later reads them too
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN journal_live_%'").fetchone()
    return bool(row and row[0])


def _entry_kinds(url: str, inv: str) -> list[str]:
    from journal import decode_entry, kind_of

    with open_store(url) as store:
        return [kind_of(decode_entry(data)) for _, data in store.entries(inv)]


def test_five_chunks_reach_a_follower_in_another_process_in_order_before_the_step_commits(store_url, tmp_path):
    args = {"chunks": 5, "release": str(tmp_path / "release"), "emitted": str(tmp_path / "emitted")}
    received: list = []
    seen_before_commit: list[str] = []

    async def main() -> None:
        async with Engine.open(store_url) as engine:
            await engine.start(streamer, args, id="s")

            async def follow() -> None:
                async for item in engine.stream("s"):
                    received.append(item)

            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await until(lambda: _listening(store_url), "the follower to listen")
                proc = _emitter(store_url, "s", args)
                try:
                    await until(lambda: len(received) >= 5, "five chunks to reach the follower")
                    # The step is still running: it waits for `release` after its last chunk.
                    seen_before_commit.extend(_entry_kinds(store_url, "s"))
                    (tmp_path / "release").touch()
                    out, _ = await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=60))
                finally:
                    if proc.poll() is None:
                        proc.kill()
                assert out.strip() == "completed"
    anyio.run(main)

    assert [msgspec.structs.replace(c, cursor="") for c in received] == [
        Chunk(invocation_id="s", seq=2, attempt=1, data=f"token-{n} ", index=n, epoch=1) for n in range(5)]
    assert len({c.cursor for c in received}) == 5  # each its own place to resume from
    assert seen_before_commit == ["started", "step"]  # `plan` only: `answer` had not committed
    assert _entry_kinds(store_url, "s") == ["started", "step", "step", "completed"]  # no entry per chunk


@pytest.mark.parametrize("resume_with", ["item", "cursor"])
def test_a_follower_cut_off_mid_answer_resumes_after_its_last_item_with_nothing_twice(store_url, tmp_path,
                                                                                       resume_with):
    """`Engine.stream(id, after=)` given the last item a follower saw (or its cursor): the
    running step's chunks it saw are still kept for late followers, and none comes again;
    the event before them neither; the chunks sent since come, then the end."""
    args = {"half": str(tmp_path / "half"), "release": str(tmp_path / "release")}
    first: list = []
    rest: list = []

    async def main() -> None:
        async with Engine.open(store_url) as engine:
            await engine.start(two_halves, args, id="h")
            async with anyio.create_task_group() as tg:
                tg.start_soon(engine.serve)
                async with contextlib.aclosing(engine.stream("h")) as stream:
                    async for item in stream:
                        first.append(item)
                        if len(first) == 4:  # the event and "a b c " (in either order): then the connection is cut
                            break
                (tmp_path / "half").touch()
                last = first[-1] if resume_with == "item" else first[-1].cursor
                async with contextlib.aclosing(engine.stream("h", after=last)) as stream:
                    async for item in stream:
                        rest.append(item)
                        if [c.data for c in rest if isinstance(c, Chunk)] == ["d ", "e "]:
                            (tmp_path / "release").touch()
                tg.cancel_scope.cancel()

    anyio.run(main)
    assert [item.value for item in first if not isinstance(item, Chunk)] == ["thinking"]
    assert [c.data for c in first if isinstance(c, Chunk)] == ["a ", "b ", "c "]
    assert [c.data for c in rest] == ["d ", "e "]  # nothing again (the event neither), nothing missing
    assert all(isinstance(c, Chunk) and c.index == n for n, c in enumerate(rest, start=3))


def test_stream_after_refuses_what_is_no_position(tmp_path):
    async def main() -> None:
        async with Engine.open(str(tmp_path / "db")) as engine:
            await engine.start(two_halves, {"half": "", "release": ""}, id="h")
            for bad, says in (("not a cursor", "is not a stream position"), (True, "not a bool"),
                              (2.5, "takes a seq, a cursor or the last item")):
                with pytest.raises((ValueError, TypeError), match=says):
                    async for _ in engine.stream("h", after=bad):  # type: ignore[arg-type]
                        pass

    anyio.run(main)


def test_the_lmdb_buffer_keeps_a_running_steps_chunks_only(tmp_path):
    """A follower that starts after the chunks were sent still reads them while the step runs;
    once the step commits they are gone, and nothing is left behind."""
    db = str(tmp_path / "db")
    args = {"chunks": 3, "release": str(tmp_path / "release"), "emitted": str(tmp_path / "emitted")}
    proc = _emitter(db, "late", args)
    try:
        wait_until(lambda: (tmp_path / "emitted").exists() or proc.poll() is not None, "the chunks to be sent")
        with open_store(db) as store:
            feed = LiveFeed.open(store, "late")
            try:
                got = wait_until(lambda: feed.take() or None, "the kept chunks")  # (sent by a thread: soon after)
                assert [c.data for c in got] == ["token-0 ", "token-1 ", "token-2 "]
            finally:
                feed.close()
        (tmp_path / "release").touch()
        assert proc.communicate(timeout=60)[0].strip() == "completed"
    finally:
        if proc.poll() is None:
            proc.kill()
    import lmdb

    env = lmdb.open(str(tmp_path / "db" / "live"), max_dbs=2)
    try:
        chunks, followers = env.open_db(b"chunks"), env.open_db(b"followers")
        with env.begin() as txn:
            assert list(txn.cursor(db=chunks)) == []
            assert list(txn.cursor(db=followers)) == []
    finally:
        env.close()


def test_a_retried_attempts_chunks_carry_its_attempt_number(tmp_path):
    async def main() -> list:
        async with Engine.open(str(tmp_path / "db")) as engine:
            await engine.start(flaky_streamer, {}, id="f")
            got: list = []

            async def follow() -> None:
                async for item in engine.stream("f"):
                    got.append(item)

            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                assert (await engine.resume("f")).result == "answered"
            return got

    got = anyio.run(main)
    assert [(c.attempt, c.index, c.data) for c in got] == [
        (1, 0, "half "), (1, 1, "a thought"), (2, 0, "a "), (2, 1, "whole "), (2, 2, "answer")]


def test_a_replayed_step_emits_nothing(tmp_path):
    """Resumed after a crash, the committed step replays silently; the one caught in flight runs again."""
    db = str(tmp_path / "db")
    args = {"chunks": 2, "release": str(tmp_path / "release"), "emitted": str(tmp_path / "emitted")}
    proc = _emitter(db, "r", args)
    wait_until(lambda: (tmp_path / "emitted").exists() or proc.poll() is not None, "the step to emit")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    (tmp_path / "release").touch()

    async def main() -> list:
        async with Engine.open(db) as engine:
            got: list = []

            async def follow() -> None:
                async for item in engine.stream("r"):
                    got.append(item)

            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                resumed = _emitter(db, "r", {**args, "resume": True})
                out, _ = await anyio.to_thread.run_sync(lambda: resumed.communicate(timeout=60))
                assert out.strip() == "completed"
            return got

    got = anyio.run(main)
    # `plan` (seq 1) was journaled before the kill and replays without a chunk; `answer` (seq 2)
    # runs again from its start, as a new stream (index 0) of the same attempt number.
    assert {c.seq for c in got} == {2}
    assert [c.data for c in got if c.index == 0].count("token-0 ") >= 1
    assert [c.data for c in got][-2:] == ["token-0 ", "token-1 "]


def test_bytes_and_a_long_chunk(tmp_path):
    async def main() -> list:
        async with Engine.open(str(tmp_path / "db")) as engine:
            await engine.start(binary_streamer, {}, id="b")
            got: list = []

            async def follow() -> None:
                async for item in engine.stream("b"):
                    got.append(item)

            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await engine.resume("b")
            return got

    got = anyio.run(main)
    assert got[0].data == b"\x00\x01raw"
    assert "".join(c.data for c in got[1:]) == "x" * 5000 and len(got) > 2  # in pieces, in order


@pytest.mark.anyio
async def test_emit_outside_its_step_and_of_other_values_is_refused(open_engine):
    kept = []

    async def handler(ctx):
        def step():
            info = current_step()
            kept.append(info)
            with pytest.raises(TypeError, match="text or bytes"):
                info.emit({"not": "text"})
            return "ran"

        await ctx.run("s", step)
        return "ok"

    async with open_engine() as engine:
        assert (await engine.run(handler)).result == "ok"
    with pytest.raises(LookupError, match="outside that step"):
        kept[0].emit("late")


@pytest.mark.anyio
async def test_current_context_is_the_handlers_and_its_spawned_tasks(open_engine):
    seen = []

    async def handler(ctx):
        seen.append(current_context() is ctx)

        async def child():
            seen.append(current_context() is ctx)
            return await current_context().run("in-task", lambda: 2)

        async with anyio.create_task_group() as tg:
            tg.start_soon(child)
        return "done"

    async with open_engine() as engine:
        assert (await engine.run(handler)).result == "done"
    assert seen and all(seen)
    with pytest.raises(LookupError, match="outside a handler"):
        current_context()
