"""`journal replay` and `runtime.testing.replay_journal`: read-only checks of journals against code."""

import json

import anyio
import pytest

from journal import MemoryStore
from runtime import Engine, NondeterminismError
from runtime.testing import replay_journal

from .conftest import target

V1 = """
from tests.cli.cli_agents import record

async def agent(ctx, input: dict) -> str:
    plan = await ctx.run("plan", record, input["log"], "plan")
    await ctx.promise("go")
    return await ctx.run("write", record, input["log"], plan + " written")
"""


@pytest.fixture
def versions(tmp_path):
    """Write handler versions to files: `versions(name, source)` returns its target."""

    def write(name, source):
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        return f"{path}:agent"

    return write


def snapshot(journal, *ids):
    return [journal("show", i, "--json").stdout for i in ids]


def test_replay_of_unchanged_code_matches_and_changes_nothing(journal, log):
    journal("run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "x"}), "--id", "s")
    journal("run", target("pipeline"), "--input", json.dumps({"log": log.path}), "--id", "p")
    before = snapshot(journal, "s", "p")
    result = journal("replay", "s", "p")
    assert result.exit_code == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("✓ s: 1 recorded operation matches (the journal ends at seq 2")
    assert lines[1] == "✓ p: 4 recorded operations match (the handler ran to its end)"
    assert "2 ok" in result.stderr
    assert snapshot(journal, "s", "p") == before
    assert log.lines() == ["draft about x", "a", "b", "c(b)", "d"]  # no step function ran again


def test_replay_against_renamed_step_exits_4_naming_seq_and_both_names(journal, log, versions):
    v1 = versions("v1", V1)
    v2 = versions("v2", V1.replace('"plan", record', '"outline", record'))
    journal("run", v1, "--input", json.dumps({"log": log.path}), "--id", "r")
    result = journal("replay", "r", "--handler", v2)
    assert result.exit_code == 4
    assert "r: diverged at seq 1" in result.stdout
    assert "journal has: step 'plan'" in result.stdout and "code asked:  step 'outline'" in result.stdout
    assert log.lines() == ["plan"]


def test_replay_all_reports_each_invocation_in_json(journal, log, versions):
    v1 = versions("v1", V1)
    journal("run", v1, "--input", json.dumps({"log": log.path}), "--id", "old")
    journal("run", target("greet"), "--input", '"x"', "--id", "fine")
    journal("run", target("greet"), "--input", '"y"', "--id", "gone")
    journal("trim", "--older-than", "0", "--keep-record")  # fine and gone lose their journals
    journal("run", target("greet"), "--input", '"z"', "--id", "new")
    result = journal("replay", "--all", "--json")
    assert result.exit_code == 0
    out = {r["id"]: r for r in json.loads(result.stdout)}
    assert set(out) == {"old", "fine", "gone", "new"}
    assert out["fine"]["status"] == out["gone"]["status"] == "skipped"
    assert out["new"] == {"id": "new", "status": "ok", "seq": None, "checked": 1, "finished": True, "message": None}
    assert out["old"]["status"] == "ok" and out["old"]["seq"] == 2


def test_code_that_goes_on_after_a_finished_journal_diverged(journal, log, versions):
    done = V1.replace('    await ctx.promise("go")\n', "")
    journal("run", versions("done", done), "--input", json.dumps({"log": log.path}), "--id", "d")
    longer = versions("longer", done.replace(
        'return await ctx.run("write", record, input["log"], plan + " written")',
        'written = await ctx.run("write", record, input["log"], plan + " written")\n'
        '    await ctx.run("extra", record, input["log"], "x")\n'
        "    return written",
    ))
    result = journal("replay", "d", "--handler", longer, "--json")
    assert result.exit_code == 4
    (report,) = json.loads(result.stdout)
    assert report["status"] == "diverged" and report["seq"] == 3
    assert "completed (the recorded run ended there)" in report["message"]
    assert "step 'extra'" in report["message"]
    assert log.lines() == ["plan", "plan written"]


def test_replay_all_accepts_a_finished_journal_that_new_code_replays_behind_patched(journal, log, versions):
    # The fix the docs recommend for a deploy: new calls guarded by ctx.patched. A journal
    # that finished under the old code took the old path, so the pre-deploy check passes.
    done = V1.replace('    await ctx.promise("go")\n', "")
    v1 = versions("agent", done)
    journal("run", v1, "--input", json.dumps({"log": log.path}), "--id", "done")
    patched = done.replace(
        'return await ctx.run("write", record, input["log"], plan + " written")',
        'written = await ctx.run("write", record, input["log"], plan + " written")\n'
        '    if ctx.patched("add-review"):\n'
        '        await ctx.run("review", record, input["log"], "review")\n'
        "    return written",
    )
    versions("agent", patched)  # deployed over the same file
    result = journal("replay", "--all", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    (report,) = json.loads(result.stdout)
    assert report["status"] == "ok" and report["finished"] is True
    assert log.lines() == ["plan", "plan written"]  # nothing ran again


def test_code_that_returns_early_diverged(journal, log, versions):
    done = V1.replace('    await ctx.promise("go")\n', "")
    journal("run", versions("done", done), "--input", json.dumps({"log": log.path}), "--id", "d")
    shorter = versions("shorter", done.replace('return await ctx.run("write", record, input["log"], plan + " written")',
                                               "return plan"))
    result = journal("replay", "d", "--handler", shorter)
    assert result.exit_code == 4
    assert "nothing: the handler returned" in result.stdout


def test_replay_of_a_handler_that_cannot_load_exits_2(journal, log, tmp_path):
    journal("run", target("greet"), "--input", '"x"', "--id", "g")
    result = journal("replay", "g", "--handler", f"{tmp_path}/missing.py:agent")
    assert result.exit_code == 2
    assert "cannot replay" in result.stdout and "does not exist" in result.stdout


def test_replay_needs_ids_or_all(journal, log):
    journal("run", target("greet"), "--input", '"x"', "--id", "g")
    assert journal("replay").exit_code == 2
    assert journal("replay", "g", "--all").exit_code == 2
    assert journal("replay", "nope").exit_code == 2


# -- replay_journal itself ----------------------------------------------------------------------


async def _record(handler, input=None, *, id="inv", resolve=None):
    store = MemoryStore()
    async with Engine.open(store=store) as engine:
        outcome = await engine.run(handler, input, id=id)
        if resolve is not None:
            await engine.resolve(id, *resolve)
            outcome = await engine.resume(id)
    return store, outcome


def _never(*args):
    raise AssertionError("replay ran a step function")


@pytest.mark.anyio
async def test_concurrent_steps_replay_whatever_order_they_finished_in():
    async def slow(delay, value):
        await anyio.sleep(delay)
        return value

    async def agent(ctx) -> list:
        results = {}

        async def branch(name, delay):
            first = await ctx.run(name, slow, delay, name)
            results[name] = await ctx.run(name + "-2", slow, 0, first + "!")

        async with anyio.create_task_group() as tg:
            tg.start_soon(branch, "slow", 0.05)
            tg.start_soon(branch, "fast", 0)
        return [results["slow"], results["fast"]]

    store, outcome = await _record(agent)
    assert outcome.result == ["slow!", "fast!"]
    report = await replay_journal(agent, store, "inv")
    assert (report.checked, report.finished, report.stopped_at) == (4, True, None)


class _Crash(BaseException):
    """Stands in for the process dying mid-way: nothing more is journaled."""


@pytest.mark.anyio
async def test_the_check_of_an_unfinished_task_group_stops_once_every_branch_stops():
    # Recorded: three branches, each one step, then the process died in the middle of the
    # second round. Replayed: every branch stops where it would go live, so the check ends
    # there (at once, without waiting for a quiet spell) and reports what it checked.
    # Branch b's second step dies only once the other two have journaled theirs, so the
    # journal holds five entries whichever order the branches ran in.
    others = {name: anyio.Event() for name in "ac"}

    async def second(name):
        if name == "b":
            for done in others.values():
                await done.wait()
            raise _Crash()
        return name

    async def agent(ctx) -> list:
        async def branch(name):
            await ctx.run(name, lambda: name)
            await ctx.run(name + "-2", second, name)
            if name in others:
                others[name].set()

        async with anyio.create_task_group() as tg:
            for name in "abc":
                tg.start_soon(branch, name)
        return "done"

    store = MemoryStore()
    async with Engine.open(store=store) as engine:
        with pytest.raises(BaseException) as crashed:
            await engine.run(agent, id="inv")
    assert crashed.group_contains(_Crash) if isinstance(crashed.value, BaseExceptionGroup) else crashed.type is _Crash
    seqs = {seq for seq, _ in store.entries("inv", 1)}
    # Branch b's second step took its seq before it ran, and the process died in it: a gap.
    missing = min(set(range(1, max(seqs) + 2)) - seqs)
    with anyio.fail_after(5):
        report = await replay_journal(agent, store, "inv")
    assert not report.finished and report.checked == len(seqs) == 5 and report.stopped_at == missing


@pytest.mark.anyio
async def test_a_branch_waiting_on_a_stopped_sibling_does_not_keep_the_check_running():
    # A branch awaiting an event that a sibling sets only after a step the journal does not
    # hold: the sibling stops there, the event never comes, and the check still ends.
    async def agent(ctx) -> str:
        ready = anyio.Event()

        async def producer():
            await ctx.run("make", lambda: "made")
            ready.set()

        async def consumer():
            await ready.wait()
            await ctx.run("use", lambda: "used")

        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer)
            tg.start_soon(producer)
        return "done"

    store = MemoryStore()
    async with Engine.open(store=store) as engine:
        await engine.start(agent, id="inv")  # journaled: entry 0 only
    with anyio.fail_after(5):
        report = await replay_journal(agent, store, "inv")
    assert (report.checked, report.finished, report.stopped_at) == (0, False, 1)


@pytest.mark.anyio
async def test_a_handler_that_swallows_the_divergence_still_fails_the_check():
    async def recorded(ctx) -> str:
        return await ctx.run("a", lambda: "a")

    async def changed(ctx) -> str:
        try:
            return await ctx.run("b", _never)
        except Exception:
            return await ctx.run("a", _never)

    store, _ = await _record(recorded)
    with pytest.raises(NondeterminismError) as caught:
        await replay_journal(changed, store, "inv")
    assert caught.value.seq == 1
    assert "journal has: step 'a'" in str(caught.value) and "code asked:  step 'b'" in str(caught.value)


@pytest.mark.anyio
async def test_recorded_values_errors_and_promises_come_back_without_running_anything():
    from runtime import TerminalError

    def refuse():
        raise TerminalError("no")

    seen = {}

    async def agent(ctx) -> str:
        seen["now"] = ctx.now()
        seen["approved"] = await ctx.promise("ok")
        try:
            await ctx.run("refuse", refuse)
        except TerminalError as exc:
            seen["error"] = str(exc)
        return await ctx.run("value", lambda: "v")

    store, outcome = await _record(agent, resolve=("ok", {"yes": 1}))
    assert outcome.result == "v"
    live = dict(seen)

    async def replayed(ctx) -> str:
        seen["now"] = ctx.now()
        seen["approved"] = await ctx.promise("ok")
        try:
            await ctx.run("refuse", _never)
        except TerminalError as exc:
            seen["error"] = str(exc)
        return await ctx.run("value", _never)

    seen.clear()
    report = await replay_journal(replayed, store, "inv")
    assert seen == live
    assert report.finished and report.checked == 4


@pytest.mark.anyio
async def test_a_durable_sleep_is_not_waited_for():
    async def agent(ctx) -> str:
        await ctx.sleep(0.3)
        return await ctx.run("after", lambda: "x")

    store, _ = await _record(agent)
    with anyio.fail_after(0.2):
        report = await replay_journal(agent, store, "inv")
    assert report.finished


@pytest.mark.anyio
async def test_a_completed_journal_whose_timer_lies_in_the_future_replays_to_the_end():
    # Written by a host whose clock ran ahead: the entries after the timer show it ended.
    import msgspec

    from journal import decode_entry, encode_entry
    from journal.kv._store import entry_key

    async def agent(ctx) -> str:
        await ctx.sleep(0.01)
        return await ctx.run("after", lambda: "x")

    store, _ = await _record(agent)
    hour = 3600 * 10**6  # as if the recording host's clock ran an hour ahead
    slept = decode_entry(store.entries("inv")[1][1])
    later = encode_entry(msgspec.structs.replace(slept, at=slept.at + hour, until=slept.until + hour))
    store._transact(lambda txn: txn.put("entries", entry_key(b"inv", 1), later))
    with anyio.fail_after(60):  # a hang guard, far below the hour
        report = await replay_journal(agent, store, "inv")
    assert report.finished


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_a_journal_waiting_on_a_timer_stops_where_it_ends():
    async def agent(ctx) -> str:
        first = await ctx.run("first", lambda: "1")
        await ctx.sleep(3600)
        return await ctx.run("after", _never, first)

    store, outcome = await _record(agent)
    assert outcome.status == "suspended"
    with anyio.fail_after(60):  # a hang guard
        report = await replay_journal(agent, store, "inv")
    assert (report.finished, report.checked, report.stopped_at) == (False, 2, 3)


@pytest.mark.anyio
async def test_child_invocations_are_neither_started_nor_run_on_replay():
    ran = []

    async def child(ctx, n: int) -> int:
        return await ctx.run("double", lambda: ran.append(n) or n * 2)

    async def parent(ctx) -> list:
        return [await ctx.call(child, 1), await ctx.call(child, 2)]

    store, outcome = await _record(parent)
    assert outcome.result == [2, 4] and ran == [1, 2]
    invocations = sorted(r.id for r in store.list())
    report = await replay_journal(parent, store, "inv")
    assert report.finished
    assert ran == [1, 2]
    assert sorted(r.id for r in store.list()) == invocations
