"""Shares of uncontended limits (`journal/limits/_shares.py`), on LMDB and PostgreSQL: steps
of one process use a share with no write to the store, and still, across engines of their own
(as two processes would be), a concurrency is never exceeded, a rate holds in every window, a
line formed elsewhere gets its unit, a rule changed elsewhere is obeyed, and no unit is left
held once the engines close."""

import functools
import os
import time

import anyio
import pytest

from journal.limits import Granted, LimitRule, Window, _logic
from journal.limits._shares import SharingTable
from runtime import Context, Engine

from ..conftest import store_target
from ..waiting import DEADLINE, until, wait_until
from .test_limits import Gauge

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


@pytest.fixture
def shares(monkeypatch):
    """How many shares were taken (by any engine of the test)."""
    taken = []
    new_share = SharingTable._new_share

    def counted(self, *args, **kwargs):
        taken.append(args[0].names)
        return new_share(self, *args, **kwargs)

    monkeypatch.setattr(SharingTable, "_new_share", counted)
    return taken


@pytest.fixture(params=["lmdb", "postgres"])
def url(request, tmp_path):
    """The store the engines of a test share: an LMDB directory (as processes on one host
    would), a PostgreSQL database (as hosts would)."""
    return store_target(request.param, request, tmp_path)


async def _in_use(url, name):
    async with Engine.open(url) as engine:
        view = await engine.limits.get(name)
    return view.in_use, view.waiting


async def test_a_concurrency_limit_holds_across_engines_using_shares(url, anyio_backend, shares):
    gauge = Gauge()
    bursts_done = anyio.Event()

    async def steady(ctx: Context, n: int) -> None:
        for i in range(n):  # (until the bursts are over: steps on shares before, in line during)
            await ctx.run(f"s{i}", gauge, i, 0, limit="db")
            if bursts_done.is_set():
                break

    async def bursts(ctx: Context, n: int) -> None:
        for b in range(n):
            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(functools.partial(ctx.run, f"b{b}-{i}", gauge, i, 0.002, limit="db"))

    async with Engine.open(url) as a, Engine.open(url) as b:
        await a.limits.set("db", concurrency=4)
        async with anyio.create_task_group() as tg:
            for engine, tag in ((a, "a"), (b, "b")):
                tg.start_soon(functools.partial(engine.run, steady, 10_000, id=f"{tag}-steady"))
            await until(lambda: shares, "a step to go on a share")
            # Then bursts of more steps at once than the limit, in both engines, while steps go on shares.
            async with anyio.create_task_group() as inner:
                for engine, tag in ((a, "a"), (b, "b")):
                    inner.start_soon(functools.partial(engine.run, bursts, 6, id=f"{tag}-bursts"))
            bursts_done.set()
        for engine, tag in ((a, "a"), (b, "b")):
            for kind in ("steady", "bursts"):
                assert (await engine.get(f"{tag}-{kind}")).status == "completed"
    assert 1 <= gauge.most <= 4, gauge.most
    assert await _in_use(url, "db") == (0, 0)


async def test_a_rate_holds_in_every_window_with_shares(url, anyio_backend, shares):
    limit, period = 300, 1.0
    spans: list[tuple[float, float]] = []  # (asked, ran): each step was granted between the two

    async def steady(ctx: Context, n: int) -> None:
        for i in range(n):
            asked = time.time()
            ran = await ctx.run(f"s{i}", time.time, limit="api")
            spans.append((asked, ran))

    async with Engine.open(url) as a, Engine.open(url) as b:
        await a.limits.set("api", rate=f"{limit}/{period:g}s")
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(a.run, steady, 300, id="a"))
            tg.start_soon(functools.partial(b.run, steady, 300, id="b"))
    assert shares, "no step went on a share"
    # Steps granted within one period: those asked no earlier than a step was and run less than a
    # period after it was asked (where exactly each was granted between the two is not known).
    spans.sort()
    most = max(sum(1 for asked, ran in spans[i:] if ran < start + period) for i, (start, _) in enumerate(spans))
    assert most <= limit, most
    assert len(spans) == 600


async def test_a_waiter_elsewhere_gets_the_unit_of_an_idle_share(url, anyio_backend, shares, monkeypatch):
    # Shares live 3 s here, so that a's is still there when b's steps start on a slow machine.
    monkeypatch.setattr("journal.limits._shares.LIFE", 3.0)
    monkeypatch.setattr("journal.limits._shares.LIFE_US", 3 * 10**6)
    monkeypatch.setattr("journal.backends.lmdb._limits._SHARE_LIFE", 3.0)
    gauge = Gauge(meet=2)

    async def until_shared(ctx: Context) -> int:
        n = 0  # (the first steps of an engine go to the thread: its owner's lock, the rules)
        while not shares:
            n += await ctx.run(f"s{n}", lambda: 1, limit="db")
        return n

    async def two(ctx: Context) -> None:
        async with anyio.create_task_group() as tg:
            for i in range(2):
                tg.start_soon(functools.partial(ctx.run, f"s{i}", gauge, i, 0, limit="db"))

    async with Engine.open(url) as a, Engine.open(url) as b:
        await a.limits.set("db", concurrency=2)
        assert (await a.run(until_shared)).status == "completed"  # its share holds a unit a moment longer
        assert a.store.limits()._shares, "a's share ended before b's steps start"
        # b needs both units at once: it gets the second when a's share ends by itself (a makes no
        # further call to the server that would give it back sooner).
        with anyio.fail_after(DEADLINE):
            assert (await b.run(two)).status == "completed"
        assert gauge.most == 2
    assert await _in_use(url, "db") == (0, 0)


async def test_a_rule_changed_elsewhere_stops_steps_on_a_share(url, anyio_backend, shares):
    stop = anyio.Event()
    ran = []

    async def looping(ctx: Context) -> int:
        n = 0
        while not stop.is_set():
            ran.append(await ctx.run(f"s{n}", lambda: 1, limit="api"))
            n += 1
        return n

    async with Engine.open(url) as a, Engine.open(url) as b:
        await a.limits.set("api", concurrency=100, rate="1000000/m")
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(a.run, looping, id="loop"))
            await until(lambda: len(ran) > 100 and shares, "steps on shares")
            # Another process lets no more in this hour (the window holds far more already): the
            # looping steps stop, and stand in line.
            await b.limits.set("api", concurrency=100, rate="1/h")
            table = b.store.limits()
            await until(lambda: next(v.waiting for v in table.ls() if v.name == "api") == 1,
                        "the looping step to stand in line")
            stop.set()
            await b.limits.set("api", concurrency=100)  # (the one waiting goes on, and ends)
        assert (await a.get("loop")).status == "completed"
    assert await _in_use(url, "api") == (0, 0)


async def test_steps_on_an_lmdb_share_make_no_write_transaction(tmp_path, anyio_backend, shares, monkeypatch):
    """On LMDB a step on a share reads the limit's row and writes nothing: a write transaction
    takes a share (64 rate units) and another gives it back, not two for every step."""
    from journal.backends.lmdb import _limits

    # (Ending by age, or with the rules read again, on a slow machine, would take more shares.)
    monkeypatch.setattr(_limits, "_SHARE_LIFE", 3600.0)
    monkeypatch.setattr("journal.limits._table.RULES_FOR", 3600.0)
    writes = []
    transact = _limits.LmdbLimits._transact

    def counted(self, work, **kwargs):
        writes.append(work)
        return transact(self, work, **kwargs)

    monkeypatch.setattr(_limits.LmdbLimits, "_transact", counted)

    async def steps(ctx: Context, n: int) -> int:
        for i in range(n):
            await ctx.run(f"s{i}", lambda: 1, limit="api")
        return n

    url = str(tmp_path / "db")
    async with Engine.open(url) as engine:
        await engine.limits.set("api", concurrency=10, rate="100000/m")
        writes.clear()
        assert (await engine.run(steps, 640)).result == 640
        # 640 steps: ten shares of 64 units, each taken in one write and given back in another.
        assert len(shares) == 10, len(shares)
        assert len(writes) <= 2 * 10 + 1, len(writes)
    async with Engine.open(url) as engine:
        view = await engine.limits.get("api")
        table = engine.store.limits()
        counted = table._read(lambda txn: _logic.decode_state(txn.get("limit_state", b"api")).rate_count)
    assert (view.in_use, view.waiting) == (0, 0)
    assert counted == 640  # every step counted in the window once, no share's unused unit left over


async def test_a_share_whose_life_ends_during_its_step_goes_back_when_the_step_ends(url, anyio_backend,
                                                                                     monkeypatch):
    """The end of a share's life may come while a step runs on it, and its step's release a
    moment before the share's `until` by the clock (a timer fires early: uvloop's by up to a
    millisecond). The share goes back at that release all the same, not at some later step."""
    from journal.backends.postgres._limits import PostgresLimits

    # The test plays the timers that end a share (the table's thread, PostgreSQL's event loop),
    # and its release comes before `until`.
    for cls in (SharingTable, PostgresLimits):
        monkeypatch.setattr(cls, "_end_later", lambda self, share: None)
    async with Engine.open(url) as a, Engine.open(url) as b:
        await a.limits.set("db", concurrency=4)
        table = a.store.limits()
        limiter = a._limiter
        share = None
        for _ in range(50):  # (the first steps on PostgreSQL go to a thread: its owner's lock, the rules)
            request = limiter.request(("db",))
            answer = limiter.acquire_now(request)
            if answer is None:
                await limiter.wait(request, answer)
            share = table._users.get(request.hid)
            if share is not None:
                break
            await limiter.release(request.hid, ("db",))
        assert share is not None, "no share taken"
        share.until = time.monotonic() + 3600
        table._share_expired(share)  # its life ends while the step is on it
        await limiter.release(request.hid, ("db",))  # before `until`, by the clock
        # (Nothing else of engine a ends the share now: no step, no listing, no settling.)
        other = b.store.limits()
        await until(lambda: [(v.in_use, v.waiting) for v in other.ls() if v.name == "db"] == [(0, 0)],
                    "the share's unit to go back")


def test_an_idle_share_goes_back_after_the_event_loop_that_took_it_ended(url, anyio_backend, shares):
    """An engine used without `Engine.open`, one `anyio.run` after another (docs/testing.md):
    the share its last steps left idle goes back soon after the end of its life though no
    event loop runs any more, and another process (here another store) sees the unit free."""
    from journal import open_store

    async def steps(ctx: Context) -> int:
        n = 0  # (the first steps on PostgreSQL go to a thread: its owner's lock, the rules)
        while not shares and n < 1000:
            n += await ctx.run(f"s{n}", lambda: 1, limit="db")
        return n

    store, other = open_store(url), open_store(url)
    try:
        store.limits().set("db", LimitRule(concurrency=4))
        engine = Engine(store, durability="async")
        outcome = anyio.run(engine.run, steps)
        assert outcome.status == "completed"
        assert shares, "no step went on a share"

        def in_use() -> int:
            return next(v.in_use for v in other.limits().ls() if v.name == "db")

        wait_until(lambda: in_use() == 0, "the idle share to go back")
        # The thread that gave it back ends once no share has been taken for a while.
        wait_until(lambda: store.limits()._reaper is None, "the thread that ends shares to end, idle")
    finally:
        other.close()
        store.close()


def test_a_closed_lmdb_table_takes_no_share(tmp_path, anyio_backend):
    """A step's acquisition that finishes on a thread after its store closed (its waiter gone)
    takes a unit of its own, which its release gives back, never a share, whose thread has ended."""
    from journal import open_store
    from journal.limits import Request

    path = str(tmp_path / "db")
    a, b = open_store(path), open_store(path)
    try:
        table, other = a.limits(), b.limits()  # (b's keeps the limits' environment open)
        table.set("db", LimitRule(concurrency=4))
        a.close()
        request = Request("late", ("db",), "us", "here", os.getpid())

        async def late() -> None:
            assert isinstance(table.acquire(request), Granted)
            assert not table._users
            table.release(request.hid, request.names)

        anyio.run(late)
        assert next(v.in_use for v in other.ls() if v.name == "db") == 0
    finally:
        b.close()


def test_a_share_given_back_twice_takes_its_unused_units_out_of_the_window_once(url, anyio_backend):
    """A share's give-back may be sent twice (the event loop's call, still waiting for its
    answer, and a thread's that carried the same give-back meanwhile): the second finds the
    hold gone and leaves the window counting the steps that ran."""
    from journal import open_store
    from journal.limits import Request
    from journal.limits._table import now_us

    store = open_store(url)
    try:
        table = store.limits()
        table.set("api", LimitRule(concurrency=100, rate=Window(10_000, 60)))
        known = table._rules()
        request = Request("s0~share", ("api",), "us", "here", os.getpid())
        now = now_us()
        counted = table._transact(lambda txn: _logic.acquire_share(txn, request, now, now + 50_000, 16, known))
        assert counted is not None
        counted = tuple(counted)

        def rate_count() -> int:
            return table._read(lambda txn: _logic.decode_state(txn.get("limit_state", b"api")).rate_count)

        assert rate_count() == 16
        for _ in range(2):  # 7 of its 16 units used: 9 go back, once
            table._transact(lambda txn: _logic.release_share(txn, request.hid, request.names, None, now_us(), known,
                                                             9, counted))
            assert rate_count() == 7
        assert next(v.in_use for v in table.ls() if v.name == "api") == 0
    finally:
        store.close()
