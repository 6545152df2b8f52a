"""check_determinism finds nondeterministic handlers, names the crash point and the first
difference, and passes deterministic ones; what it reports and how it can be driven."""

from __future__ import annotations

import random
import threading
import time

import anyio
import pytest

from journal import Append, MemoryStore, Renew, Status
from runtime import Context, PromiseRejected, RetryPolicy, TerminalError
from runtime.testing import (
    CrashPoint,
    DeterminismCheckFailed,
    Failure,
    Reject,
    check_determinism,
)


def search(query: str) -> list[str]:
    return [f"{query}: page {i}" for i in range(2)]


def slow_search(query: str) -> list[str]:
    time.sleep(0.2)
    return search(query)


def llm(prompt: str) -> str:
    return f"answer to {prompt!r}"


# -- a deterministic agent, and the same agent with each classic mistake -----------------


async def deterministic_agent(ctx: Context, question: str) -> dict:
    started = ctx.now()
    pages = await ctx.run("search", search, question)
    temperature = round(ctx.random().uniform(0, 1), 3)
    tools = sorted({"fetch", "read", "cite"})  # sorted: the same order in every process
    used = [await ctx.run(tool, llm, f"{tool} {pages[0]}") for tool in tools]
    await ctx.sleep(0.001)
    answer = await ctx.run("answer", llm, f"{question} at {temperature}")
    return {"answer": answer, "used": used, "took_s": (ctx.now() - started).total_seconds() >= 0}


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_deterministic_agent_passes_every_crash_point(durability):
    report = check_determinism(deterministic_agent, "why is the sky blue?", durability=durability)
    assert report.status == Status.COMPLETED
    assert report.result["answer"].startswith("answer to 'why is the sky blue?")
    assert report.writes >= 6 and report.crash_points == 2 * report.writes
    assert report.runs == 1 + report.crash_points
    assert report.crashes == report.crash_points  # every scheduled crash happened
    assert report.reruns > 0  # steps caught between their side effect and their commit ran again
    assert "crash points" in str(report)


async def wall_clock_agent(ctx: Context, question: str) -> str:
    started = time.time()  # not journaled: a replay sees its own clock
    pages = await ctx.run("search", slow_search, question)
    if time.time() - started > 0.1:  # "the search was slow, keep the answer short"
        return await ctx.run("summarize", llm, pages[0])
    return await ctx.run("answer", llm, pages[0])


def test_a_wall_clock_branch_is_reported_at_the_crash_after_the_slow_step():
    with pytest.raises(DeterminismCheckFailed) as failed:
        check_determinism(wall_clock_agent, "q", guard=False)
    # Crashing before the search commits re-runs it (slow again: same branch). Crashing after
    # replays it instantly, so the clock says "fast" and the handler takes the other branch.
    assert failed.value.schedule == [CrashPoint(1, before=False)]
    assert failed.value.crash_point == "crashed after journal write 1 (seq 1: step 'search')"
    assert failed.value.difference.startswith(
        "first difference in the journal at seq 2: the reference has step 'summarize'"
    )
    assert "this run has step 'answer'" in failed.value.difference


def test_the_guard_stops_the_wall_clock_agent_in_its_reference_run_naming_ctx_now():
    with pytest.raises(DeterminismCheckFailed) as failed:
        check_determinism(wall_clock_agent, "q")
    message = str(failed.value)
    assert "reference run, without any crash, stopped as diverged" in message
    assert "time.time() was called by handler code" in message and "Use ctx.now()" in message
    assert "test_check_determinism.py" in message  # where the call was made


class Tool:
    """A tool whose hash changes from one process to the next, as a str's does under hash
    randomization (PYTHONHASHSEED): a set of them iterates in a per-process order."""

    def __init__(self, index: int, name: str, seed: int) -> None:
        self.index, self.name, self.seed = index, name, seed

    def __hash__(self) -> int:
        return (5 * self.index + 3 * self.seed) % 8


def make_set_iteration_agent():
    processes = iter(range(1000))  # each simulated process runs the handler from the top once

    async def set_iteration_agent(ctx: Context, question: str) -> list[str]:
        seed = next(processes)
        tools = {Tool(i, name, seed) for i, name in enumerate(["search", "fetch", "read"])}
        return [await ctx.run(tool.name, llm, question) for tool in tools]

    return set_iteration_agent


def test_unordered_set_iteration_is_reported_at_the_first_crash_point():
    with pytest.raises(DeterminismCheckFailed) as failed:
        check_determinism(make_set_iteration_agent(), "q")
    # Every process iterates in its own order: already the first crash and resume differ.
    assert failed.value.schedule == [CrashPoint(1, before=True)]
    assert failed.value.crash_point == "crashed before journal write 1 (seq 1: step 'fetch')"
    assert failed.value.difference == (
        "first difference in the journal at seq 1: the reference has step 'search' = \"answer to 'q'\" "
        f"(args digest {_digest('search', 'q')}), this run has step 'read' = \"answer to 'q'\" "
        f"(args digest {_digest('read', 'q')})"
    )


def make_extra_task_agent():
    processes = iter(range(1000))

    async def extra_task_agent(ctx: Context, question: str) -> str:
        # Some processes start a task of their own first (a library warming a cache, say), so
        # the task that makes the step is spawned at another place among its siblings.
        async with anyio.create_task_group() as tg:
            if next(processes) > 0:
                tg.start_soon(anyio.sleep, 0)
            answers = []

            async def ask() -> None:
                answers.append(await ctx.run("search", llm, question))

            tg.start_soon(ask)
        return answers[0]

    return extra_task_agent


def test_a_step_made_from_a_task_spawned_elsewhere_is_reported_as_moved():
    with pytest.raises(DeterminismCheckFailed) as failed:
        check_determinism(make_extra_task_agent(), "q", guard=False)
    assert failed.value.difference.startswith("first difference in the journal at seq 1: the reference has step "
                                              "'search'")
    assert "the same entry, reached by another path" in failed.value.difference


def _digest(name: str, *args: object) -> str:
    from journal import digest

    return f"{digest(name, args, {}):016x}"


async def unseeded_random_agent(ctx: Context, question: str) -> str:
    await ctx.run("search", search, question)
    temperature = random.random()  # not ctx.random(): another value after a crash
    return await ctx.run("answer", llm, f"{question} at {temperature:.6f}")


def test_random_without_ctx_is_reported_with_the_changed_call():
    with pytest.raises(DeterminismCheckFailed) as failed:
        check_determinism(unseeded_random_agent, "q", guard=False)
    assert failed.value.schedule == [CrashPoint(1, before=True)]
    assert failed.value.difference.startswith("first difference in the journal at seq 2: the reference has step 'answer'")
    assert "outcome: the reference run completed with" in str(failed.value)


def test_the_guard_names_ctx_random_for_random_without_ctx():
    with pytest.raises(DeterminismCheckFailed, match=r"random\.random\(\) was called .* Use ctx\.random\(\)\.random"):
        check_determinism(unseeded_random_agent, "q")


# -- exactly-once: what the step counts catch ------------------------------------------------


class LosingStore(MemoryStore):
    """A broken backend: acknowledges the commit of step 'pay' but keeps nothing of it."""

    def apply(self, ops, *, durable=True):
        from journal import decode_entry

        kept = []
        for op in ops:
            if isinstance(op, Append):
                entries = [(s, d) for s, d in op.entries if getattr(decode_entry(d), "name", None) != "pay"]
                op = Append(op.id, op.epoch, entries, op.transition)
            kept.append(op)
        return super().apply(kept, durable=durable)


async def pay_and_confirm(ctx: Context, amount: int) -> str:
    receipt = await ctx.run("pay", llm, f"pay {amount}")
    return await ctx.run("confirm", llm, receipt)


def test_a_committed_step_that_runs_again_is_reported():
    with pytest.raises(DeterminismCheckFailed) as failed:
        check_determinism(pay_and_confirm, 10, store_factory=LosingStore)
    message = str(failed.value)
    assert "step 'pay' (seq 1) ran again in process 2 although its outcome was already committed" in message
    assert "process 1: its outcome was committed" in message


def test_steps_run_at_most_once_more_when_a_crash_catches_them_in_flight():
    report = check_determinism(pay_and_confirm, 10)
    # Two steps, each caught once between its side effect and its commit.
    assert report.reruns == 2


async def keeps_going_after_an_unjournaled_failure(ctx: Context, n: int) -> str:
    try:
        await ctx.run("leaky", lambda: object())  # msgspec cannot encode the result
    except TerminalError:
        pass
    return await ctx.run("after", llm, "carry on")


def test_a_caught_unencodable_result_does_not_run_its_step_again_after_a_crash():
    # The step's TerminalError is journaled (its value cannot be), so replay raises it
    # again without running the step.
    check_determinism(keeps_going_after_an_unjournaled_failure, 1)


# -- driving it: failures, promises, cancellation, schedules, backends --------------------------


async def resilient(ctx: Context, topic: str) -> dict:
    quick = RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0)
    found = await ctx.run("search", search, topic, retry=quick)
    try:
        draft = await ctx.run("draft", llm, found[0], retry=quick)
    except TerminalError as exc:
        draft = f"no draft ({exc})"
    try:
        approved = await ctx.promise("approval")
    except PromiseRejected:
        approved = False
    return {"draft": draft, "approved": approved}


def test_injected_transient_failures_are_retried_and_terminal_ones_journaled():
    report = check_determinism(
        resilient, "tides", promises={"approval": True},
        failures={"search": Failure(times=2), "draft": Failure(terminal=True, message="model refused")},
    )
    assert report.result == {"draft": "no draft (model refused)", "approved": True}


def test_exhausted_retries_fail_the_step_the_same_way_after_every_crash():
    report = check_determinism(resilient, "tides", promises={"approval": True}, failures={"draft": Failure(times=5)})
    assert report.result["draft"] == "no draft (step 'draft' failed after 3 attempts: injected failure (attempt 3))"


@pytest.mark.parametrize("timing", ["waiting", "start", 1, 2])
def test_promises_resolved_at_any_time_give_the_same_result(timing):
    report = check_determinism(resilient, "tides", promises={"approval": Reject("not today")},
                               promise_timing={"approval": timing})
    assert report.result["approved"] is False


async def compensating(ctx: Context, order: str) -> str:
    from runtime import Cancelled

    await ctx.run("reserve", llm, order)
    try:
        await ctx.promise("payment")
    except Cancelled:
        await ctx.run("release", llm, order)
        raise
    return await ctx.run("ship", llm, order)


@pytest.mark.parametrize("cancel", ["start", "suspended"])
def test_cancellation_and_compensation_are_checked_like_any_other_path(cancel):
    report = check_determinism(compensating, "o-1", cancel=cancel, promises={"payment": 5})
    assert report.status == Status.CANCELLED


def test_multi_crash_schedules_crash_each_resumed_process_again():
    report = check_determinism(
        deterministic_agent, "q", single_crashes=False,
        schedules=[[CrashPoint(1, True), CrashPoint(1, True), CrashPoint(2, False)], [CrashPoint(99)]],
    )
    assert report.crash_points == 0 and report.schedules == 2 and report.crashes == 3
    assert report.processes == 1 + 4 + 1  # reference, the three crashed ones and the last, the unreached one


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("durability", ["sync", "async"])
def test_concurrent_steps_pass_on_every_backend_and_durability(backend, durability):
    async def fan_out(ctx: Context, topics: list[str]) -> list:
        results: dict[str, list] = {}

        async def one(topic: str) -> None:
            results[topic] = await ctx.run(f"search {topic}", search, topic)

        async with anyio.create_task_group() as tg:
            for topic in topics:
                tg.start_soon(one, topic)
        return [results[t] for t in topics]

    report = check_determinism(fan_out, ["a", "b", "c"], backend=backend, durability=durability)
    assert report.result[2] == search("c")
    assert report.writes >= 2 and report.crash_points == 2 * report.writes  # every write was a crash point


def test_durable_timers_that_suspend_are_resumed_when_due():
    async def waits(ctx: Context) -> str:
        await ctx.sleep(0.01)
        return await ctx.run("after", llm, "the timer")

    report = check_determinism(waits, engine_options={"inline_sleep_limit": 0})
    assert report.status == Status.COMPLETED


def test_a_promise_without_a_value_is_a_usage_error_naming_it():
    with pytest.raises(ValueError, match=r"waits for promise 'approval'.*promises=\{'approval': \.\.\.\}"):
        check_determinism(resilient, "tides")


def test_exit_durability_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="exit"):
        check_determinism(deterministic_agent, "q", durability="exit")


def test_the_checked_handler_does_not_replace_the_users_registration():
    from runtime import handler_path, load_handler

    check_determinism(pay_and_confirm, 1)
    assert load_handler(handler_path(pay_and_confirm)) is pay_and_confirm


@pytest.mark.anyio
async def test_calling_it_from_async_code_says_how_to_do_it_instead():
    with pytest.raises(RuntimeError, match="to_thread.run_sync"):
        check_determinism(pay_and_confirm, 1)


def test_a_handler_path_is_accepted_like_the_function():
    report = check_determinism("tests.property.test_check_determinism:pay_and_confirm", 3)
    assert report.handler == "tests.property.test_check_determinism:pay_and_confirm"


def test_runtime_testing_exports_exactly_its_all():
    import types

    import runtime.testing as testing

    for name in testing.__all__:
        assert getattr(testing, name) is not None, name
    public = {n for n, v in vars(testing).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    public -= {"Any"}
    assert public <= set(testing.__all__), public - set(testing.__all__)


def test_a_long_durable_timer_is_refused_instead_of_waited_for():
    async def naps(ctx: Context) -> str:
        await ctx.sleep(3600)
        return "rested"

    with pytest.raises(ValueError, match="durable timer due in 3600 s, longer than max_timer_wait=10"):
        check_determinism(naps)


class _RenewalsSeen(MemoryStore):
    """A store that tells when the engine's lease watcher renewed a lease through it."""

    latest: _RenewalsSeen | None = None

    def __init__(self) -> None:
        super().__init__()
        self.renewed = threading.Event()
        _RenewalsSeen.latest = self

    def apply(self, ops, *, durable=True):  # type: ignore[no-untyped-def]
        results = super().apply(ops, durable=durable)
        if any(isinstance(op, Renew) for op in ops):
            self.renewed.set()
        return results


async def _outlast_a_renewal() -> str:
    store = _RenewalsSeen.latest
    assert store is not None
    deadline = time.monotonic() + 10
    while not store.renewed.is_set():
        assert time.monotonic() < deadline, "the lease watcher renewed no lease within 10 s"
        await anyio.sleep(0.01)
    return "outlasted"


async def renewed_while_in_a_step(ctx: Context) -> str:
    return await ctx.run("long", _outlast_a_renewal)


def test_a_step_that_outlasts_a_lease_renewal_passes():
    # The lease watcher renews through the store with `durable=False` once a run outlasts a
    # third of its lease (a slow model call, a loaded machine); the simulated process's store
    # must take that argument like any store, or the renewal's error stops the handler.
    report = check_determinism(renewed_while_in_a_step, engine_options={"lease_ttl": 0.6},
                               store_factory=_RenewalsSeen)
    assert report.result == "outlasted" and report.crash_points >= 2
