"""Steps under the store's limits (DESIGN.md, "Limits"): concurrency held exactly, rate and
token windows, usage settling the estimate, push-back without using up attempts, and a
replayed step that acquires nothing."""

import functools
import os
import threading

import anyio
import httpx
import pytest

from journal import HOST
from journal.limits import Request
from runtime import Context, RateLimited, RetryPolicy, current_step
from runtime.testing import check_determinism

from ..waiting import DEADLINE, until

pytestmark = pytest.mark.anyio


class Gauge:
    """How many step functions run at once, as the functions themselves count it.

    With `meet`, a call waits (up to the tests' deadline) until that many have run at once before it
    ends, so whether they overlap does not hang on how fast a loaded machine hands out the
    units: a limit that lets fewer in fails the count, one that lets more in is seen too."""

    def __init__(self, meet=None):
        self.now = 0
        self.most = 0
        self.calls = 0
        self.meet = meet
        self._lock = threading.Lock()

    async def __call__(self, i, pause=0.01):
        with self._lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
        try:
            if self.meet is not None:
                meet = self.meet
                await until(lambda: self.most >= meet, f"{meet} calls to run at once")
            await anyio.sleep(pause)
        finally:
            with self._lock:
                self.now -= 1
        return i


async def test_a_concurrency_limit_is_never_exceeded(open_engine):
    gauge = Gauge(meet=3)

    async def agent(ctx: Context, n: int) -> list:
        out = []

        async def one(i):
            out.append(await ctx.run(f"call-{i}", gauge, i, limit="db"))

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        return sorted(out)

    async with open_engine() as engine:
        await engine.limits.set("db", concurrency=3)
        outcome = await engine.run(agent, 12)
        assert outcome.result == list(range(12))
        assert gauge.most == 3
        (view,) = await engine.limits.ls()
        assert (view.name, view.in_use, view.waiting) == ("db", 0, 0)


async def test_without_a_rule_a_limit_name_limits_nothing(open_engine):
    gauge = Gauge(meet=6)

    async def agent(ctx: Context) -> None:
        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(functools.partial(ctx.run, f"s{i}", gauge, i, 0.05, limit="nobody"))

    async with open_engine() as engine:
        outcome = await engine.run(agent)
    assert outcome.status == "completed" and gauge.most == 6


async def test_a_rate_limit_spaces_steps_over_its_window(open_engine):
    import time

    starts, ends = [], []

    def stamp(i):
        starts.append(time.monotonic())
        ends.append(time.monotonic())
        return i

    async def agent(ctx: Context) -> None:
        for i in range(5):
            await ctx.run(f"s{i}", stamp, i, limit="api")

    async with open_engine() as engine:
        await engine.limits.set("api", rate="2/1s")
        before = time.monotonic()
        await engine.run(agent)
    # No window of 1 s holds more than 2 grants. A step starts some time after its grant, a time a
    # loaded machine stretches; but the steps run one after another, so step i was granted after
    # step i-1 ended (after `before` for the first), and step i+2 at least 1 s after step i was.
    # Without the limit the five start within milliseconds.
    for i in range(len(starts) - 2):
        granted_after = ends[i - 1] if i else before
        assert starts[i + 2] - granted_after >= 0.99, (i, starts, ends)


async def test_used_tokens_settle_the_estimate(open_engine):
    async def call(n):
        current_step().used(tokens=n)
        return n

    async def agent(ctx: Context) -> None:
        await ctx.run("a", call, 120, limit="llm", tokens=1000)
        await ctx.run("b", call, 30, limit="llm", tokens=1000)

    async with open_engine() as engine:
        await engine.limits.set("llm", tokens="100000/m")
        await engine.run(agent)
        view = await engine.limits.get("llm")
    assert view.tokens_used == 150


async def test_push_back_pauses_the_limit_and_does_not_use_up_attempts(open_engine):
    tries = []

    async def flaky():
        tries.append(1)
        if len(tries) < 4:
            raise RateLimited(retry_after=0.05)
        return "ok"

    async def agent(ctx: Context) -> str:
        return await ctx.run("call", flaky, limit="llm", retry=RetryPolicy(max_attempts=1))

    async with open_engine() as engine:
        await engine.limits.set("llm", concurrency=5)
        outcome = await engine.run(agent)
    assert outcome.result == "ok" and len(tries) == 4


async def test_a_plain_step_function_gives_its_unit_back_after_a_push_back_and_a_failure(open_engine):
    # A plain function on the loop (inline=True) takes and gives back its unit without an await:
    # with a concurrency of 1, a unit kept by a failed attempt would stop every later one.
    tries = []

    def flaky():
        tries.append(1)
        if len(tries) <= 2:
            raise RateLimited(retry_after=0.01)
        if len(tries) == 3:
            raise ValueError("once")
        return "ok"

    async def agent(ctx: Context) -> str:
        return await ctx.run("call", flaky, inline=True, limit="one",
                             retry=RetryPolicy(max_attempts=2, initial_interval=0.01))

    async with open_engine() as engine:
        await engine.limits.set("one", concurrency=1)
        with anyio.fail_after(30):
            outcome = await engine.run(agent)
        view = await engine.limits.get("one")
    assert outcome.result == "ok" and len(tries) == 4
    assert (view.in_use, view.waiting) == (0, 0)


async def test_an_http_429_with_retry_after_pauses_every_holder_of_the_limit(open_engine):
    tries = []

    async def answer():
        tries.append(1)
        if len(tries) == 1:
            request = httpx.Request("POST", "http://provider.invalid/v1/chat/completions")
            response = httpx.Response(429, headers={"retry-after": "0.3"}, request=request)
            raise httpx.HTTPStatusError("429 Too Many Requests", request=request, response=response)
        return "ok"

    async def agent(ctx: Context) -> str:
        return await ctx.run("call", answer, limit="llm", retry=RetryPolicy(max_attempts=1))

    async with open_engine() as engine:
        await engine.limits.set("llm", concurrency=5)
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.run, agent)
            with anyio.fail_after(30):
                while True:  # the pause is in the store, for every process to see
                    view = await engine.limits.get("llm")
                    if view.paused_until is not None or len(tries) >= 2:
                        break
                    await anyio.sleep(0.01)
        assert len(tries) == 2


async def test_a_replayed_step_acquires_nothing(open_engine):
    gauge = Gauge()

    async def agent(ctx: Context) -> int:
        a = await ctx.run("a", gauge, 1, limit="db")
        await ctx.promise("go")
        return a + await ctx.run("b", gauge, 2, limit="free")

    async with open_engine() as engine:
        await engine.limits.set("db", concurrency=1)
        outcome = await engine.run(agent, id="r")
        assert outcome.status == "suspended"
        # Another holder takes the only unit of `db`: a replayed `a` that acquired would wait for ever.
        assert str(engine.store.limits().acquire(Request("other", ("db",), engine.owner, HOST, os.getpid()))) == "Granted()"
        await engine.resolve("r", "go", True)
        with anyio.fail_after(30):  # what it is about: the resumed run does not wait on `db`
            outcome = await engine.resume("r")
        db = await engine.limits.get("db")
    assert outcome.result == 3 and gauge.calls == 2
    assert db.in_use == 1 and db.waiting == 0  # only the other holder's unit; nobody in its line


def test_check_determinism_passes_on_a_limited_handler():
    from journal import MemoryStore
    from journal.limits import LimitRule, Window

    def limited_store():
        store = MemoryStore()
        store.limits().set("db", LimitRule(concurrency=1, tokens=Window(1000, 60.0)))
        return store

    check_determinism(limited_agent, store_factory=limited_store)


async def limited_agent(ctx: Context) -> int:
    a = await ctx.run("a", lambda: 1, limit="db", tokens=10)
    b = await ctx.run("b", lambda: 2, limit=["db", "other"], tokens=10)
    return a + b


# -- invocations under limits ------------------------------------------------------------------

RUNS: list[str] = []
RUNNING = Gauge()


async def limited_job(ctx: Context, name: str) -> str:
    await ctx.run("work", RUNNING, name, 0.02)
    RUNS.append(name)
    if name.startswith("wait"):
        await ctx.promise("go")
    return name


async def test_an_invocation_holds_a_unit_while_it_runs_and_none_while_suspended(open_engine):
    RUNS.clear()
    RUNNING.most = RUNNING.now = 0
    async with open_engine() as engine:
        await engine.limits.set("jobs", concurrency=2)
        # Two wait on a promise (suspended: they hold nothing), then eight that must get through.
        for name in ["wait-1", "wait-2"] + [f"job-{i}" for i in range(8)]:
            await engine.start(limited_job, name, id=name, limit="jobs")
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(engine.serve, concurrency=16))
            with anyio.fail_after(60):
                while len([n for n in RUNS if n.startswith("job")]) < 8:
                    view = await engine.limits.get("jobs")
                    assert view.in_use <= 2
                    await anyio.sleep(0.01)
                for name in ("wait-1", "wait-2"):
                    while (await engine.get(name)).status != "suspended":
                        await anyio.sleep(0.01)
                    await engine.resolve(name, "go", True)
                for name in ("wait-1", "wait-2"):
                    while (await engine.get(name)).status != "completed":
                        await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        assert RUNNING.most <= 2
        view = await engine.limits.get("jobs")
        assert (view.in_use, view.waiting) == (0, 0)


async def test_an_invocation_parked_for_a_damaged_journal_gives_back_the_unit_a_look_took_for_it(open_engine):
    """A worker's look takes a unit for an invocation before its execution reads the journal;
    a journal found damaged there parks the invocation, and the unit goes back with it."""
    from journal.kv._rules import entry_key

    RUNS.clear()
    async with open_engine() as engine:
        await engine.limits.set("one", concurrency=1)
        await engine.start(limited_job, "bad", id="bad", limit="one")
        await engine.start(limited_job, "good", id="good", limit="one")
        engine.store._transact(lambda txn: txn.put("entries", entry_key(b"bad", 0), b"\xc1 not msgpack"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(engine.serve, concurrency=16))
            await until(lambda: "good" in RUNS, "the invocation behind the damaged one to run")
            tg.cancel_scope.cancel()
        assert (await engine.get("bad")).status == "diverged"
        view = await engine.limits.get("one")
        assert (view.in_use, view.waiting) == (0, 0)


async def test_waiting_invocations_are_served_by_priority_then_age(open_engine):
    RUNS.clear()
    async with open_engine() as engine:
        await engine.limits.set("one", concurrency=1)
        table = engine.store.limits()
        assert str(table.acquire(Request("blocker", ("one",), "x", HOST, os.getpid()))) == "Granted()"
        for name, priority in [("a", 0), ("b", 5), ("c", 0), ("d", 9), ("e", 5)]:
            await engine.start(limited_job, name, id=name, limit="one", priority=priority)
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(engine.serve, concurrency=16))
            with anyio.fail_after(60):
                while (await engine.limits.get("one")).waiting < 5:  # all in line, none running
                    await anyio.sleep(0.01)
                assert (await engine.get("a")).status == "pending"
                table.release("blocker", ("one",))
                while len(RUNS) < 5:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert RUNS == ["d", "b", "e", "a", "c"]


async def test_an_invocation_free_to_run_is_found_behind_more_waiting_ones_than_a_look_reads(open_engine):
    """A worker reads the head of the run queue a window at a time (64 here): with every one of
    the head waiting for a held limit, it reads on past them to the one that may run now."""
    from ..waiting import until

    RUNS.clear()
    async with open_engine() as engine:
        await engine.limits.set("one", concurrency=1)
        table = engine.store.limits()
        assert str(table.acquire(Request("blocker", ("one",), "x", HOST, os.getpid()))) == "Granted()"
        for i in range(100):
            await engine.start(limited_job, f"held-{i:03d}", id=f"held-{i:03d}", limit="one")
        await engine.start(limited_job, "free", id="free")
        assert engine.store.ready()[-1] == "free"  # behind all of them in the queue
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(engine.serve, concurrency=16))
            await until(lambda: "free" in RUNS, "the invocation with no limit to run")
            assert (await engine.get("held-000")).status == "pending"
            tg.cancel_scope.cancel()
        table.release("blocker", ("one",))
    assert RUNS == ["free"]


async def test_a_rule_changed_while_steps_wait_is_obeyed_at_once_and_prefix_rules_count_each_name(open_engine):
    gauge = Gauge()
    release = anyio.Event()

    async def hold(i):
        await gauge(i, 0)
        if i < 2:
            await release.wait()  # the first ones keep their units until the rule has changed
        return i

    async def agent(ctx: Context, tenant: str) -> list:
        out = []

        async def one(i):
            out.append(await ctx.run(f"s{i}", hold, i, limit=f"tenant:{tenant}"))

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(one, i)
        return sorted(out)

    async with open_engine() as engine:
        await engine.limits.set("tenant:*", concurrency=1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(engine.run, agent, "a", id="a"))
            tg.start_soon(functools.partial(engine.run, agent, "b", id="b"))
            with anyio.fail_after(30):
                while {v.name: v.in_use for v in await engine.limits.ls()} != {"tenant:*": 0, "tenant:a": 1,
                                                                                  "tenant:b": 1}:
                    await anyio.sleep(0.01)  # one each: the prefix rule counts each tenant apart
                await engine.limits.set("tenant:*", concurrency=2)
                while {v.name: v.in_use for v in await engine.limits.ls()} != {"tenant:*": 0, "tenant:a": 2,
                                                                                  "tenant:b": 2}:
                    await anyio.sleep(0.01)
            release.set()
        assert (await engine.get("a")).result == list(range(6))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("reply", ["answered", "lost"])
async def test_a_waiter_cancelled_while_its_look_runs_on_a_thread_leaves_no_unit_held(postgres_url, anyio_backend,
                                                                                      reply):
    """The waiter leaves at once; its look at the line goes on, on the thread, and may be
    granted the unit after the waiter gave back what it held: the thread gives it back, also
    when the look's transaction committed and its answer was lost (the call raises)."""
    from journal import PostgresStore
    from journal.errors import StoreError
    from journal.limits import LimitRule
    from runtime._flow._limits._limiter import Limiter

    store = PostgresStore(postgres_url)
    try:
        table = store.limits()
        table.set("one", LimitRule(concurrency=1))
        limiter = Limiter(store, "owner-a")
        first = await limiter.acquire(("one",))
        # The waiter's looks go to the thread, and its first one is held at the door until the
        # test lets it through, after the waiter has gone.
        entered, door, finished = threading.Event(), threading.Event(), threading.Event()
        real_acquire = table.acquire

        def held_acquire(request):
            if request.hid == first:
                return real_acquire(request)
            entered.set()
            door.wait(60)
            try:
                answer = real_acquire(request)
                if reply == "lost":
                    raise StoreError("the connection ended before the commit's answer came")
                return answer
            finally:
                finished.set()

        async def no_loop_path(request):
            return None

        table.acquire = held_acquire
        table.acquire_async = no_loop_path
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(limiter.acquire, ("one",))
                await until(entered.is_set, "the waiter's look to start on the thread")
                await limiter.release(first, ("one",))  # the unit is free: the held look will be granted it
                scope.cancel()
        door.set()
        await until(finished.is_set, "the abandoned look to end")
        await limiter.settle()
        await until(lambda: next(v.in_use for v in table.ls() if v.name == "one") == 0,
                    "the unit the abandoned look took to be given back")
        assert next(v.waiting for v in table.ls() if v.name == "one") == 0
    finally:
        store.close()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_waiter_cancelled_while_its_look_is_on_the_network_leaves_no_unit_held(pg_server, anyio_backend,
                                                                                         pg_limit_rules_kept):
    """A look at the line sent from the event loop, cancelled before the server got it: the
    waiter drops the connection and gives back what it held; the look reaches the server
    later still (a packet the network retransmits), and would take the unit for a live owner.
    The give-back first ends the dropped session at the server, so the late look finds none."""
    from bench.pgproxy import CommitCutter
    from journal import PostgresStore
    from journal.limits import LimitRule
    from runtime._flow._limits._limiter import Limiter

    # (`pg_limit_rules_kept`: the look must go out from the event loop. From a thread's
    # connection, the held message would be that one's, mid-transaction with the state row
    # locked, and never let go, since that connection is not dropped.)
    proxy = CommitCutter(str(pg_server.dir), pg_server.port).start()
    store = PostgresStore(proxy.url(pg_server.create_database()))
    try:
        table = store.limits()
        table.set("one", LimitRule(concurrency=1))
        limiter = Limiter(store, "owner-a")
        for _ in range(3):  # the event loop's connection opened, the rules and the line known
            await limiter.release(await limiter.acquire(("one",)), ("one",))
        await limiter.settle()
        assert table._writer is not None
        proxy.hold(b"late-waiter")
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(limiter.acquire, ("one",), hid="late-waiter"))
                await until(proxy.holding.is_set, "the look to be sent from the event loop")
                scope.cancel()
        with anyio.fail_after(DEADLINE):
            await limiter.settle()
        proxy.let_through()
        await until(proxy.delivered.is_set, "the late look to reach the server and its connection to end")
        assert next(v.in_use for v in table.ls() if v.name == "one") == 0
        assert next(v.waiting for v in table.ls() if v.name == "one") == 0
    finally:
        proxy.stop()  # (first: a failure above must not leave the store's close waiting on a held message)
        store.close()
