"""Limits on PostgreSQL from the event loop (`journal/backends/postgres/_limits_loop.py`): one
call that writes only if the rows it read are unchanged, releases carried by the next
acquisition, and the transaction on a thread for whatever the loop's path cannot decide."""

import os

import pytest

from journal import HOST, PostgresStore
from journal.limits import Blocked, Granted, LimitRule, Request, Window, _logic

from ..waiting import until

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"]),
              pytest.mark.usefixtures("pg_limit_rules_kept")]


def _req(hid, *names, owner="me", priority=0):
    return Request(hid, names, owner, HOST, os.getpid(), priority=priority)


@pytest.fixture
def stores(postgres_url):
    """Two stores on one database: two processes sharing its limits, as far as the limits know."""
    a, b = PostgresStore(postgres_url), PostgresStore(postgres_url)
    yield a, b
    a.close()
    b.close()


def _in_use(store, name):
    return next(v.in_use for v in store.limits().ls() if v.name == name)


def _no_thread_path(table):
    def refuse(*args, **kwargs):
        raise AssertionError("went to the thread's transaction")
    table._run = refuse


async def _warm(table, owner="me"):
    """The first acquisition is the thread's (the owner's lock, the rules); the loop's connection opens on the next."""
    table.acquire(_req("warm", "llm", owner=owner))
    table.release("warm", ("llm",))
    assert await table.acquire_async(_req("warm2", "llm", owner=owner)) is not None
    await table.release_async("warm2", ("llm",))
    await table.settle()


async def test_the_loop_takes_and_gives_back_units_without_the_thread(stores, anyio_backend):
    a, _ = stores
    table = a.limits()
    table.set("llm", LimitRule(concurrency=2))
    await _warm(table)
    run = table._run
    _no_thread_path(table)
    assert isinstance(await table.acquire_async(_req("h1", "llm")), Granted)
    assert isinstance(await table.acquire_async(_req("h2", "llm")), Granted)
    assert isinstance(await table.acquire_async(_req("h1", "llm")), Granted)  # granted already: granted again
    assert await table.release_async("h1", ("llm",))
    assert isinstance(await table.acquire_async(_req("h3", "llm")), Granted)  # carries h1's release
    # Full: whether the holders live is the thread's question.
    assert await table.acquire_async(_req("h4", "llm")) is None
    table._run = run
    assert isinstance(table.acquire(_req("h4", "llm")), Blocked)
    assert _in_use(a, "llm") == 2


async def test_a_change_made_elsewhere_is_seen_and_kept(stores, anyio_backend):
    a, b = stores
    table, other = a.limits(), b.limits()
    table.set("llm", LimitRule(concurrency=3))
    await _warm(table)
    assert isinstance(await table.acquire_async(_req("mine", "llm")), Granted)
    # Another process takes a unit: this one's view of the row is stale now, and a write made
    # from that view would drop the other's hold.
    assert isinstance(other.acquire(_req("theirs", "llm", owner="them")), Granted)
    assert isinstance(await table.acquire_async(_req("third", "llm")), Granted)
    assert _in_use(b, "llm") == 3
    assert await table.acquire_async(_req("fourth", "llm")) is None  # full: the thread's
    assert isinstance(table.acquire(_req("fourth", "llm")), Blocked)
    other.release("theirs", ("llm",))
    assert await table.release_async("fourth", ("llm",))  # (leaves the line)
    assert isinstance(await table.acquire_async(_req("fifth", "llm")), Granted)
    assert _in_use(b, "llm") == 3


async def test_a_release_kept_for_the_next_acquisition_comes_before_anything_on_the_thread(stores, anyio_backend):
    a, b = stores
    table = a.limits()
    table.set("llm", LimitRule(concurrency=1))
    await _warm(table)
    assert isinstance(await table.acquire_async(_req("run", "llm")), Granted)
    assert await table.release_async("run", ("llm",))
    assert table._deferred  # not sent yet
    # The same hold taken again on the thread (a worker claiming the invocation again): the
    # release goes first, so the hold it takes is not given back after it.
    assert isinstance(table.acquire(_req("run", "llm")), Granted)
    assert not table._deferred
    await table.settle()
    assert _in_use(b, "llm") == 1
    assert isinstance(b.limits().acquire(_req("them", "llm", owner="them")), Blocked)


@pytest.mark.parametrize("concurrency", [1, 5])
async def test_a_release_nobody_carries_goes_alone(stores, anyio_backend, concurrency):
    """At once from a full limit (someone may want the unit), after a moment from one with room."""
    a, b = stores
    table = a.limits()
    table.set("llm", LimitRule(concurrency=concurrency))
    await _warm(table)
    assert isinstance(await table.acquire_async(_req("h", "llm")), Granted)
    assert _in_use(b, "llm") == 1
    assert await table.release_async("h", ("llm",))
    # (The other session may see the release committed a moment before this loop has
    # struck it off its list of releases to send.)
    await until(lambda: _in_use(b, "llm") == 0 and not table._deferred, "the release to reach the store")


async def _held_with_one_in_line(stores):
    """`llm` at concurrency 1, its unit held by "h" from the loop of the first store and
    "first" (priority 5) waiting for it through the second: the two stores' tables."""
    a, b = stores
    table, other = a.limits(), b.limits()
    table.set("llm", LimitRule(concurrency=1))
    await _warm(table)
    assert isinstance(await table.acquire_async(_req("h", "llm")), Granted)
    assert isinstance(other.acquire(_req("first", "llm", owner="them", priority=5)), Blocked)
    return table, other


async def test_a_line_with_a_waiter_goes_to_the_thread_which_serves_it_first(stores, anyio_backend):
    table, other = await _held_with_one_in_line(stores)
    assert await table.release_async("h", ("llm",))
    # Whether the waiter lives is the thread's question: the loop hands the acquisition over.
    assert await table.acquire_async(_req("later", "llm")) is None
    assert isinstance(table.acquire(_req("later", "llm")), Blocked)
    assert isinstance(other.acquire(_req("first", "llm", owner="them", priority=5)), Granted)


async def test_a_closing_store_gives_back_the_releases_it_kept(postgres_url, anyio_backend):
    a = PostgresStore(postgres_url)
    with PostgresStore(postgres_url) as b:
        table = a.limits()
        table.set("llm", LimitRule(concurrency=1))
        await _warm(table)
        assert isinstance(await table.acquire_async(_req("h", "llm")), Granted)
        assert await table.release_async("h", ("llm",))
        a.close()
        assert _in_use(b, "llm") == 0


async def test_the_function_is_created_once_by_any_number_of_stores(postgres_url, anyio_backend):
    stores = [PostgresStore(postgres_url) for _ in range(3)]
    try:
        for store in stores:
            store.limits().set("llm", LimitRule(concurrency=3))
        for n, store in enumerate(stores):
            await _warm(store.limits(), owner=f"o{n}")
            assert isinstance(await store.limits().acquire_async(_req(f"h{n}", "llm", owner=f"o{n}")), Granted)
        assert _in_use(stores[0], "llm") == 3
    finally:
        for store in stores:
            store.close()


@pytest.mark.parametrize("path", ["loop", "thread"])
async def test_a_unit_given_back_to_a_line_wakes_every_worker(stores, postgres_url, anyio_backend, path):
    """Workers sleep until a NOTIFY between looks: a unit going back to a limit someone waits
    for sends one, so the first in line goes now rather than at its worker's next look."""
    import psycopg

    from journal.backends.postgres._rows import CHANNEL

    table, other = await _held_with_one_in_line(stores)
    with psycopg.connect(postgres_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        if path == "loop":
            assert await table.release_async("h", ("llm",))
            await table.settle()
        else:
            table.release("h", ("llm",))
        heard = [n.channel for n in listener.notifies(timeout=30, stop_after=1)]
    assert heard == [CHANNEL]
    assert isinstance(other.acquire(_req("first", "llm", owner="them", priority=5)), Granted)


# -- shares (`journal/limits/_shares.py`) ------------------------------------


@pytest.fixture
def long_shares(monkeypatch):
    """Shares live for the test (ending by age, on a slow machine, would change what it looks at)."""
    monkeypatch.setattr("journal.limits._shares.LIFE", 3600.0)
    monkeypatch.setattr("journal.limits._shares.LIFE_US", 3600 * 10**6)


def _no_call(table):
    """Any call of the loop's connection (or the thread's transaction) fails the test."""
    _no_thread_path(table)
    writer = table._writer

    async def refuse(params):
        raise AssertionError("made a call to the server")
    writer.apply = refuse


async def _shared(stores, rule):
    """The first store's table with a share of `llm` taken by the attempt "s0" and given back
    (idle): (its table, the other store's table)."""
    a, b = stores
    table = a.limits()
    table.set("llm", rule)
    await _warm(table)
    assert isinstance(await table.acquire_async(_req("s0", "llm")), Granted)
    assert table._shares and _in_use(b, "llm") == 1
    assert await table.release_async("s0", ("llm",))
    return table, b.limits()


async def test_steps_go_on_a_share_with_no_call_until_its_rate_units_are_used(stores, anyio_backend, long_shares):
    from journal.limits._logic import SHARE_UNITS

    table, other = await _shared(stores, LimitRule(concurrency=100, rate=Window(100_000, 60)))
    counted = _logic.decode_state(table._seen[("limit_state", b"llm")]).rate_count
    run, apply = table._run, table._writer.apply
    _no_call(table)
    for n in range(1, SHARE_UNITS):  # the first of the share's rate units went to "s0"
        assert isinstance(await table.acquire_async(_req(f"s{n}", "llm")), Granted)
        assert await table.release_async(f"s{n}", ("llm",))
    assert not table._shares  # used up: its unit goes back with the next call, which takes a new share
    table._run, table._writer.apply = run, apply
    assert isinstance(await table.acquire_async(_req("next", "llm")), Granted)
    assert table._shares
    assert _in_use(stores[1], "llm") == 1
    # The window counts a block of units for each share taken: never fewer than the steps granted.
    assert _logic.decode_state(table._seen[("limit_state", b"llm")]).rate_count == counted + SHARE_UNITS


async def test_a_second_attempt_at_once_takes_its_own_unit(stores, anyio_backend):
    table, other = await _shared(stores, LimitRule(concurrency=4))
    assert isinstance(await table.acquire_async(_req("first", "llm")), Granted)  # on the share
    assert isinstance(await table.acquire_async(_req("second", "llm")), Granted)  # the share is busy
    assert _in_use(stores[1], "llm") == 2
    await table.release_async("first", ("llm",))
    await table.release_async("second", ("llm",))
    await table.settle()
    assert _in_use(stores[1], "llm") == 0


async def test_a_share_ends_when_this_process_sees_someone_wait(stores, anyio_backend):
    table, other = await _shared(stores, LimitRule(concurrency=2))
    # The other process fills the limit and stands in line.
    assert isinstance(other.acquire(_req("theirs", "llm", owner="them")), Granted)
    assert isinstance(other.acquire(_req("waits", "llm", owner="them")), Blocked)
    # This process sees it at its next call (a step under other names here, in line too), and
    # gives its share back rather than use it again: the next step stands in line.
    assert await table.acquire_async(_req("look", "llm", "other")) is None
    assert await table.acquire_async(_req("mine", "llm")) is None
    assert not table._shares
    await table.settle()
    assert isinstance(other.acquire(_req("waits", "llm", owner="them")), Granted)


async def test_an_idle_share_ends_by_itself(stores, anyio_backend):
    table, other = await _shared(stores, LimitRule(concurrency=2))
    assert isinstance(other.acquire(_req("theirs", "llm", owner="them")), Granted)
    assert isinstance(other.acquire(_req("waits", "llm", owner="them")), Blocked)
    # Nothing of this process calls the server again: the share ends after its life, its unit
    # goes back alone, and the waiter gets it.
    await until(lambda: isinstance(other.acquire(_req("waits", "llm", owner="them")), Granted),
                "the waiter to get the share's unit")
    # The give-back is struck off just after its commit, which the waiter may see first.
    await until(lambda: not table._shares and not table._deferred, "nothing of the share left in this process")


async def test_the_share_of_a_store_closing_or_listing_goes_back(stores, anyio_backend):
    table, other = await _shared(stores, LimitRule(concurrency=10))
    assert [(v.name, v.in_use) for v in table.ls()] == [("llm", 0)]  # its own listing: its idle share gone
    assert not table._shares
    assert isinstance(await table.acquire_async(_req("again", "llm")), Granted)
    assert table._shares and _in_use(stores[1], "llm") == 1
    stores[0].close()  # while a step is on it
    assert _in_use(stores[1], "llm") == 0


async def test_a_step_released_on_the_thread_gives_its_share_back(stores, anyio_backend):
    table, other = await _shared(stores, LimitRule(concurrency=10))
    assert isinstance(await table.acquire_async(_req("s1", "llm")), Granted)
    assert table.acquire(_req("s1", "llm")) == Granted()  # (asked again on the thread: on the share still)
    table.release("s1", ("llm",), 7)
    assert not table._shares and not table._users
    assert [(v.name, v.in_use, v.tokens_total) for v in other.ls()] == [("llm", 0, 7)]


@pytest.mark.parametrize("rule", [LimitRule(concurrency=1), LimitRule(rate=Window(150, 60)),
                                  LimitRule(concurrency=10, tokens=Window(100_000, 60))],
                         ids=["concurrency-1", "small-rate", "tokens"])
async def test_no_share_without_plenty_of_room(stores, anyio_backend, rule):
    a, b = stores
    table = a.limits()
    table.set("llm", rule)
    await _warm(table)
    assert isinstance(await table.acquire_async(_req("s0", "llm")), Granted)
    assert not table._shares
    await table.release_async("s0", ("llm",))


async def test_the_rate_units_a_share_did_not_use_leave_the_window_with_it(stores, anyio_backend, long_shares):
    table, other = await _shared(stores, LimitRule(concurrency=100, rate=Window(100_000, 60)))

    def counted():
        return other._read(lambda txn: _logic._state(txn, "llm")).rate_count

    assert counted() == 2 + _logic.SHARE_UNITS  # (`_warm`: two steps; "s0" took a share of 16)
    assert isinstance(await table.acquire_async(_req("s1", "llm")), Granted)
    assert await table.release_async("s1", ("llm",))
    await table.settle()
    assert counted() == 4  # the steps granted, no more


async def test_a_step_standing_in_line_does_not_go_on_a_share(stores, anyio_backend, long_shares):
    table, other = await _shared(stores, LimitRule(concurrency=4))
    for n in range(3):
        assert isinstance(other.acquire(_req(f"t{n}", "llm", owner="them")), Granted)
    assert isinstance(table.acquire(_req("w", "llm")), Blocked)  # full: it waits in line
    # The share is idle, and this process has not seen the line: still, the waiter asking again
    # is not granted on the share (its place in the line would stay behind, in everyone's way).
    assert await table.acquire_async(_req("w", "llm")) is None  # (in line still: the thread's question)
    assert "w" not in table._users
    # Nor does a later step of this process pass it on the share: the share ends.
    assert await table.acquire_async(_req("later", "llm")) is None
    assert "later" not in table._users and not table._shares
    table.release("later", ("llm",))  # (it leaves the line: the test goes on with "w")
    other.release("t0", ("llm",))
    assert isinstance(table.acquire(_req("w", "llm")), Granted)
    await table.settle()
    view = next(v for v in other.ls() if v.name == "llm")
    assert (view.in_use, view.waiting) == (3, 0)  # t1, t2 and w (settled: the share went back)


async def test_a_step_that_stopped_asking_no_longer_holds_the_share_up(stores, anyio_backend, long_shares, monkeypatch):
    """A step noted in a line that never asks again (its wait cancelled while its acquisition ran on
    a thread, and that acquisition ending after the release) stops counting after a while."""
    table, other = await _shared(stores, LimitRule(concurrency=4))
    table._lined(_req("w", "llm"), Blocked(("llm",), None, 0))  # noted in a line after its release
    assert await table.acquire_async(_req("s1", "llm")) is not None
    assert "s1" not in table._users and not table._shares  # neither on the share nor on a new one
    await table.release_async("s1", ("llm",))
    monkeypatch.setattr("journal.backends.postgres._limits._LINED_GONE", 0.0)
    assert isinstance(await table.acquire_async(_req("s2", "llm")), Granted)
    assert "s2" in table._users and "w" not in table._in_lines
    await table.release_async("s2", ("llm",))
    await table.settle()
    assert _in_use(stores[1], "llm") == 0


async def test_a_reply_of_several_statements_is_awaited_without_holding_the_loop(postgres_url, anyio_backend):
    # The loop's connection reads a reply part by part: waiting for a later statement's result
    # inside libpq would hold the GIL, so no other thread could run until the server answered.
    # The server sends the first result and most of the second (larger than its buffer), then
    # the third statement waits on a lock that only another thread can give up; the server
    # gives up by itself after `lock_timeout`.
    import threading

    import psycopg

    from journal.backends.postgres._loop import LoopWriter

    from ..waiting import wait_until

    writer = await LoopWriter.open(postgres_url)
    holder = psycopg.connect(postgres_url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(4242)")

    def give_up_the_lock_once_waited_on() -> None:
        with psycopg.connect(postgres_url, autocommit=True) as watcher:
            wait_until(lambda: watcher.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                               " AND NOT granted").fetchone()[0],
                       "the third statement to wait on the lock")
        holder.execute("SELECT pg_advisory_unlock(4242)")

    releaser = threading.Thread(target=give_up_the_lock_once_waited_on, daemon=True)
    releaser.start()
    try:
        writer._pg.send_query(b"SET lock_timeout = '30s'; SELECT repeat('x', 100000); SELECT pg_advisory_lock(4242); SELECT 2")
        result = await writer._result(None)
        assert result.get_value(0, 0) == b"2"
    finally:
        releaser.join(timeout=60)
        writer.close()
        holder.close()


async def test_a_session_ended_by_the_server_mid_reply_says_why(postgres_url, anyio_backend):
    # The server sends its FATAL error, then closes: the error it sent is what the caller gets,
    # not the closed socket's.
    import threading

    import psycopg

    from journal.backends.postgres._loop import LoopWriter

    from ..waiting import wait_until

    writer = await LoopWriter.open(postgres_url)
    pid = writer._pg.backend_pid

    def end_it_once_it_sleeps() -> None:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            wait_until(lambda: admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s AND query LIKE "
                                             "'%%pg_sleep%%'", (pid,)).fetchone(), "the statement to run")
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    ender = threading.Thread(target=end_it_once_it_sleeps, daemon=True)
    ender.start()
    try:
        writer._pg.send_query(b"SELECT pg_sleep(60)")
        with pytest.raises(psycopg.errors.AdminShutdown):
            await writer._result(None)
    finally:
        ender.join(timeout=60)
        writer.close()
