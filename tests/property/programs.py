"""Generated handler programs: a small language of context operations and its interpreter.

A `Program` is the *input* of one fixed handler, `run_program`, which interprets it: steps
(sync or async, with delays, retry policies, caught or uncaught failures), concurrent
groups of branches, short durable sleeps, promises, `ctx.now()`, `ctx.random()`/`ctx.uuid()`
draws, emitted events, and compensation when cancelled. Hypothesis generates programs
with `programs()`, and `scenarios()` adds what happens around them (failures injected
into steps, promise values and timings, cancellation, crash schedules, durability, the
event-loop backend, and whether sleeps suspend on a durable timer).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import msgspec
from hypothesis import strategies as st

from runtime import Cancelled, Context, PromiseRejected, RetryPolicy, TerminalError
from runtime.testing import CrashPoint, Failure, Reject, crash_schedules


class StepOp(msgspec.Struct, tag="step"):
    name: str
    value: int
    is_async: bool = False
    delay_ms: int = 0  # inside the step (async steps only): lets concurrent steps interleave
    attempts: int = 1  # RetryPolicy.max_attempts
    catch: bool = False  # catch its TerminalError and record it, instead of failing the handler


class SleepOp(msgspec.Struct, tag="sleep"):
    ms: int


class PromiseOp(msgspec.Struct, tag="promise"):
    name: str
    catch: bool = False  # catch a rejection and record it


class NowOp(msgspec.Struct, tag="now"):
    pass


class DrawOp(msgspec.Struct, tag="draw"):
    """ctx.random() and ctx.uuid(): deterministic per invocation, not journaled (sequential code only)."""


class EmitOp(msgspec.Struct, tag="emit"):
    value: int


BranchOp = StepOp | SleepOp | NowOp | EmitOp


class GroupOp(msgspec.Struct, tag="group"):
    branches: list[list[BranchOp]]
    gather: bool = False  # ctx.gather instead of an anyio task group


Op = StepOp | SleepOp | PromiseOp | NowOp | DrawOp | EmitOp | GroupOp


class Program(msgspec.Struct):
    ops: list[Op]
    compensate: bool = False  # when cancelled, run a compensating step before ending cancelled


# -- the interpreter ------------------------------------------------------------------------


def effect(value: int) -> int:
    return value * 7 + 1


async def slow_effect(value: int, delay_ms: int) -> int:
    if delay_ms:
        await anyio.sleep(delay_ms / 1000)
    return value * 7 + 1


async def run_program(ctx: Context, program: Program) -> list:
    out: list[Any] = []
    try:
        await _sequence(ctx, program.ops, out)
    except* Cancelled:
        if program.compensate:
            out.append(await ctx.run("compensate", effect, len(out)))
        raise
    return out


async def _sequence(ctx: Context, ops: list[Any], out: list[Any]) -> None:
    for op in ops:
        if isinstance(op, GroupOp):
            results: list[list[Any]] = [[] for _ in op.branches]
            if op.gather:
                await ctx.gather(*(_sequence(ctx, b, r) for b, r in zip(op.branches, results, strict=False)))
            else:
                async with anyio.create_task_group() as tg:
                    for branch, result in zip(op.branches, results, strict=False):
                        tg.start_soon(_sequence, ctx, branch, result)
            out.append(results)
        elif isinstance(op, PromiseOp):
            try:
                out.append(await ctx.promise(op.name))
            except PromiseRejected as exc:
                if not op.catch:
                    raise
                out.append(f"rejected: {exc}")
        elif isinstance(op, DrawOp):
            out.append([ctx.random().randint(0, 10**6), str(ctx.uuid())])
        else:
            out.append(await _simple(ctx, op))


async def _simple(ctx: Context, op: Any) -> Any:
    if isinstance(op, StepOp):
        retry = RetryPolicy(max_attempts=op.attempts, initial_interval=0.001, backoff=1.0, jitter=0.0)
        try:
            if op.is_async:
                return await ctx.run(op.name, slow_effect, op.value, op.delay_ms, retry=retry)
            return await ctx.run(op.name, effect, op.value, retry=retry)
        except TerminalError as exc:
            if not op.catch:
                raise
            return f"failed: {exc}"
    if isinstance(op, SleepOp):
        await ctx.sleep(op.ms / 1000)
        return "slept"
    if isinstance(op, NowOp):
        ctx.now()
        return "now"
    if isinstance(op, EmitOp):
        await ctx.emit({"event": op.value})
        return "emitted"
    raise AssertionError(f"unknown op {op!r}")


# -- generating programs ----------------------------------------------------------------------


_BOOLEANS = st.booleans()


def _steps(catch: st.SearchStrategy[bool] = _BOOLEANS) -> st.SearchStrategy[StepOp]:
    return st.builds(
        StepOp,
        name=st.just(""),  # named in order afterwards, so failures can target each step
        value=st.integers(0, 1000),
        is_async=st.booleans(),
        delay_ms=st.sampled_from([0, 0, 1, 3]),
        attempts=st.integers(1, 3),
        catch=catch,
    )


def _groups(sleeps: bool) -> st.SearchStrategy[GroupOp]:
    # Branches only interact through their results: a failure is caught in its branch, and
    # sleeps there stay inline (a durable timer would suspend the whole group from one
    # branch). Otherwise which sibling got how far before being cut short is a race, and a
    # run restarted after a crash may legitimately journal a different (valid) interleaving.
    #
    # ctx.gather gives each branch a path of its own. Plain task groups do not, and operations
    # that look the same (emits, sleeps, clock reads) at the start of sibling branches can be
    # replayed into the wrong branch (test_regressions.py reproduces it, marked xfail), so
    # there each branch starts with a step of its own name.
    ops = [_steps(st.just(True)), _steps(st.just(True)), st.just(NowOp()), st.builds(EmitOp, st.integers(0, 9))]
    if sleeps:
        ops.append(st.builds(SleepOp, st.integers(0, 3)))
    free = st.lists(st.one_of(ops), min_size=1, max_size=3)
    led = st.tuples(_steps(st.just(True)), st.lists(st.one_of(ops), max_size=2)).map(lambda t: [t[0], *t[1]])
    return st.builds(GroupOp, st.lists(free, min_size=2, max_size=3), st.just(True)) | st.builds(
        GroupOp, st.lists(led, min_size=2, max_size=3), st.just(False)
    )


@st.composite
def programs(draw: st.DrawFn, max_ops: int = 8, max_promises: int = 2, groups: bool = True,
             group_sleeps: bool = True) -> Program:
    """Handler programs; `groups=False` leaves out concurrent groups, `group_sleeps=False` sleeps in them."""
    promise_names = iter([f"p{i}" for i in range(max_promises)])

    def promise_op(catch: bool) -> Any:
        name = next(promise_names, None)
        return PromiseOp(name, catch) if name is not None else NowOp()

    choices = [
        _steps(), _steps(),
        st.builds(SleepOp, st.integers(0, 3)),
        st.builds(promise_op, st.booleans()),
        st.just(NowOp()), st.just(DrawOp()), st.builds(EmitOp, st.integers(0, 9)),
    ]
    if groups:
        choices.append(_groups(group_sleeps))
    ops = draw(st.lists(st.one_of(choices), min_size=1, max_size=max_ops))
    return _named(Program(ops, compensate=draw(st.booleans())))


def _named(program: Program) -> Program:
    counter = iter(range(10**6))

    def name(ops: list[Any]) -> list[Any]:
        out = []
        for op in ops:
            if isinstance(op, StepOp):
                op = msgspec.structs.replace(op, name=f"s{next(counter)}")
            elif isinstance(op, GroupOp):
                op = GroupOp([name(branch) for branch in op.branches], op.gather)
            out.append(op)
        return out

    return Program(name(program.ops), program.compensate)


def step_names(program: Program) -> list[str]:
    names = []

    def walk(ops: list[Any]) -> None:
        for op in ops:
            if isinstance(op, StepOp):
                names.append(op.name)
            elif isinstance(op, GroupOp):
                for branch in op.branches:
                    walk(branch)

    walk(program.ops)
    return names


def promise_names(program: Program) -> list[str]:
    return [op.name for op in program.ops if isinstance(op, PromiseOp)]


@dataclasses.dataclass
class Scenario:
    """A program and everything `check_determinism` is asked to do around it."""

    program: Program
    failures: dict[str, Failure]
    promises: dict[str, Any]
    promise_timing: dict[str, Any]
    cancel: str | None
    schedules: list[list[CrashPoint]]
    durability: str
    backend: str
    inline_sleep_limit: float
    always_replay: bool = False  # the engine's testing mode: replay from the top after every live step

    def check_kwargs(self) -> dict[str, Any]:
        return dict(
            failures=self.failures, promises=self.promises, promise_timing=self.promise_timing, cancel=self.cancel,
            schedules=self.schedules, durability=self.durability, backend=self.backend,
            engine_options={"inline_sleep_limit": self.inline_sleep_limit, "always_replay": self.always_replay},
        )


@st.composite
def scenarios(draw: st.DrawFn, max_ops: int = 8) -> Scenario:
    from runtime.testing import promise_timings, step_failures

    cancel = draw(st.sampled_from([None, None, "start", "suspended"]))
    # Whether a short durable timer still suspends after a crash depends on the clock, so
    # cancelling at the first suspension is only deterministic when that is a promise.
    inline_sleep_limit = 60.0 if cancel == "suspended" else draw(st.sampled_from([60.0, 0.0]))
    # Cancellation reaches one branch of a concurrent group first, and cuts its siblings
    # short: which one is a race, so cancelled programs stay sequential.
    program = draw(programs(max_ops=max_ops, groups=cancel is None, group_sleeps=inline_sleep_limit > 0))
    promises = {
        name: draw(st.integers(0, 99) | st.builds(Reject, st.just(f"{name} refused")))
        for name in promise_names(program)
    }
    # Cancelling at the first suspension must not race with a promise resolved meanwhile:
    # then promises are delivered when awaited.
    timing = {name: "waiting" for name in promises} if cancel == "suspended" else draw(promise_timings(promises))
    return Scenario(
        program=program,
        failures=draw(step_failures(step_names(program))),
        promises=promises,
        promise_timing=timing,
        cancel=cancel,
        schedules=draw(st.lists(crash_schedules(max_crashes=3, max_write=12), max_size=2)),
        durability=draw(st.sampled_from(["sync", "async"])),
        backend=draw(st.sampled_from(["asyncio", "trio"])),
        inline_sleep_limit=inline_sleep_limit,
        always_replay=draw(st.booleans()),
    )
