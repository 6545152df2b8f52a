"""PostgreSQL-only behaviour: sessions, races between connections, wake-ups, the schema."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from journal import Append, PostgresStore, Renew, Status, open_store
from journal.errors import FormatVersionError, InvocationBusy, LeaseLost, StoreUnavailable

from ..waiting import DEADLINE, until, wait_until
from .helpers import T0, acquire, append, create, step

HOLDER = """
import time
from journal import Acquire, PostgresStore
store = PostgresStore({url!r})
store.apply_one(Acquire("inv-1", "holder", "elsewhere", 1, 3_600_000_000, {now}))
print("acquired", flush=True)
time.sleep(3600)
"""


@pytest.fixture
def store(postgres_url):
    s = PostgresStore(postgres_url)
    yield s
    s.close()


def test_a_postgresql_url_opens_a_postgres_store(postgres_url):
    with open_store(postgres_url) as s:
        assert isinstance(s, PostgresStore) and s.blocking


def test_the_owner_of_a_lease_whose_session_ended_loses_it_at_once(store, postgres_url):
    create(store)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(url=postgres_url, now=T0)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "acquired"
        # The lease lasts an hour and its host is not this one: only its session tells.
        with pytest.raises(InvocationBusy, match="being run"):
            acquire(store, owner="me", now=T0 + 1)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdout.close()
    def claimed():
        try:
            return acquire(store, owner="me", now=T0 + 2)
        except InvocationBusy:
            return None

    # The server notices the closed connection on its own schedule.
    epoch, record = wait_until(claimed, "the server to release the dead session's lock", timeout=10)
    assert epoch == 2 and record.status == Status.RUNNING


def test_connections_racing_for_one_invocation_never_both_get_it(postgres_url):
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    try:
        for round in range(10):
            create(stores[0], f"inv-{round}")
            winners, barrier = [], threading.Barrier(len(stores))

            def take(i, round=round, winners=winners, barrier=barrier):
                barrier.wait()
                try:
                    acquire(stores[i], f"inv-{round}", owner=f"o{i}", host="elsewhere", pid=1)
                    winners.append(i)
                except InvocationBusy:
                    pass

            _in_threads(take, len(stores))
            assert len(winners) == 1, winners
            assert stores[0].lease(f"inv-{round}").epoch == 1
    finally:
        for s in stores:
            s.close()


def _in_threads(work, n: int) -> None:
    """`work(0)` ... `work(n - 1)`, each on a thread of its own, all started before any is waited for."""
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_the_counts_by_handler_and_status_stay_exact_under_concurrent_writers(postgres_url):
    # Four connections create invocations of one handler at once, then race to claim every
    # one of them (a claim lost rolls its savepoint back): every creation and every status
    # change is counted once, none lost to another transaction's.
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    per_store = 40
    try:
        barrier = threading.Barrier(len(stores))
        claimed: list[str] = []

        def work(i):
            barrier.wait()
            for n in range(per_store):
                create(stores[i], f"inv-{i}-{n}", handler="counted")
            barrier.wait()
            for j in range(len(stores)):
                for n in range(0, per_store, 2):
                    try:
                        acquire(stores[i], f"inv-{j}-{n}", owner=f"o{i}", host="elsewhere", pid=1)
                        claimed.append(f"inv-{j}-{n}")
                    except InvocationBusy:
                        pass

        _in_threads(work, len(stores))
        assert len(claimed) == len(set(claimed)) == len(stores) * per_store // 2
        (summary,) = stores[0].summary()
        assert summary.counts == {"pending": len(stores) * per_store // 2, "running": len(stores) * per_store // 2}
    finally:
        for s in stores:
            s.close()


def test_a_new_pending_invocation_wakes_a_waiting_worker(store, postgres_url):
    store.wait_for_work(0)  # listening from here on
    other = PostgresStore(postgres_url)
    try:
        create(other, "wake-me")
    finally:
        other.close()
    started = time.monotonic()
    store.wait_for_work(30)
    assert time.monotonic() - started < 30, "no NOTIFY arrived"


def test_async_durability_commits_with_synchronous_commit_off(store):
    create(store)
    epoch, _ = acquire(store)
    store.apply([Append("inv-1", epoch, [(1, step("a"))])], durable=False)
    assert store._writer.conn.execute("SHOW synchronous_commit").fetchone()[0] == "off"
    store._writer.conn.rollback()
    append(store, "inv-1", epoch, (2, step("b")))
    assert store._writer.conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
    store._writer.conn.rollback()


def test_a_store_of_another_format_version_is_refused_untouched(store, postgres_url):
    store._writer.conn.execute("UPDATE journal.meta SET v = '99' WHERE k = 'format'")
    store._writer.conn.commit()
    with pytest.raises(FormatVersionError, match="format version 99"):
        PostgresStore(postgres_url)


def test_an_unreachable_server_is_a_clear_error():
    with pytest.raises(StoreUnavailable, match="cannot reach the journal store at postgresql://nobody@/none"):
        PostgresStore("postgresql://nobody@/none?host=/nonexistent-dir&connect_timeout=2", reconnect_for=0)


def _no_thread_path(store):
    def refuse(*args, **kwargs):
        raise AssertionError("the batch went to the thread's path")
    store.apply = refuse


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_batch_of_steps_commits_from_the_event_loop_in_one_statement(store, anyio_backend):
    create(store)
    create(store, "inv-2")
    epoch, _ = acquire(store)
    epoch2, _ = acquire(store, "inv-2")
    _no_thread_path(store)
    results = await store.apply_async([Append("inv-1", epoch, [(1, step("a"))]),
                                       Append("inv-2", epoch2, [(1, step("b"))]),
                                       Append("inv-1", epoch, [(2, step("c"))])])
    assert results == [None, None, None]
    assert [seq for seq, _ in store.entries("inv-1")] == [0, 1, 2]
    assert [seq for seq, _ in store.entries("inv-2")] == [0, 1]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_step_on_the_event_loop_after_a_takeover_is_refused_by_the_lease(store, postgres_url, anyio_backend):
    from journal.errors import LeaseLost

    create(store)
    epoch, _ = acquire(store, ttl_us=1_000)
    with PostgresStore(postgres_url) as other:  # the lease expired: another process takes over
        acquire(other, owner="them", now=T0 + 10_000)
    results = await store.apply_async([Append("inv-1", epoch, [(1, step("late"))])])
    assert isinstance(results[0], LeaseLost)
    assert [seq for seq, _ in store.entries("inv-1")] == [0]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_batch_sent_from_the_event_loop_commits_for_everyone_when_its_leader_is_cancelled_natively(
        store, postgres_url, anyio_backend):
    import asyncio

    import anyio
    import psycopg

    from journal import Committer

    create(store)
    create(store, "inv-2")
    epoch, _ = acquire(store)
    epoch2, _ = acquire(store, "inv-2")
    committer = Committer(store)
    await committer.submit(Append("inv-1", epoch, [(1, step("a"))]))  # the loop's connection is open
    with psycopg.connect(postgres_url) as other:  # holds the batch's statement until it rolls back
        other.execute("LOCK TABLE journal.entries IN EXCLUSIVE MODE")
        leader = asyncio.create_task(committer.submit(Append("inv-1", epoch, [(2, step("b"))])))
        follower = asyncio.create_task(committer.submit(Append("inv-2", epoch2, [(1, step("c"))])))
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted"
        await until(lambda: other.execute(waiting).fetchone()[0] == 1, "the batch's statement to wait for the lock")
        leader.cancel()  # asyncio's own cancellation goes through anyio's shield
        other.rollback()
    with anyio.fail_after(DEADLINE):
        assert await follower is None
    with pytest.raises(asyncio.CancelledError):
        await leader
    # The statement ran to its end: both steps are journaled, and the connection still works.
    assert [seq for seq, _ in store.entries("inv-1")] == [0, 1, 2]
    assert [seq for seq, _ in store.entries("inv-2")] == [0, 1]
    assert await committer.submit(Append("inv-2", epoch2, [(2, step("d"))])) is None
    assert [seq for seq, _ in store.entries("inv-2")] == [0, 1, 2]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_lone_step_cancelled_natively_while_its_statement_runs_is_journaled_and_the_connection_goes_on(
        store, postgres_url, anyio_backend):
    import asyncio

    import psycopg

    from journal import Committer

    create(store)
    epoch, _ = acquire(store)
    committer = Committer(store)
    await committer.submit(Append("inv-1", epoch, [(1, step("a"))]))  # the loop's connection is open
    with psycopg.connect(postgres_url) as other:
        other.execute("LOCK TABLE journal.entries IN EXCLUSIVE MODE")
        lone = asyncio.create_task(committer.submit(Append("inv-1", epoch, [(2, step("b"))])))
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted"
        await until(lambda: other.execute(waiting).fetchone()[0] == 1, "the statement to wait for the lock")
        lone.cancel()  # delivered at its next wake-up, whatever the socket does meanwhile
        other.rollback()
    with pytest.raises(asyncio.CancelledError):  # raised once its statement has ended
        await lone
    assert [seq for seq, _ in store.entries("inv-1")] == [0, 1, 2]
    # Its reply was read: the next statement on the loop's connection meets none.
    assert await committer.submit(Append("inv-1", epoch, [(3, step("c"))])) is None
    assert [seq for seq, _ in store.entries("inv-1")] == [0, 1, 2, 3]


_SHUTDOWN_IN_FLIGHT = """
import asyncio
import threading
import psycopg
from journal import Append, Committer, PostgresStore
from tests.journal.helpers import acquire, create, step
from tests.waiting import until, wait_until
store = PostgresStore({url!r})
create(store)
epoch, _ = acquire(store)
other = psycopg.connect({url!r})

async def main():
    committer = Committer(store)
    await committer.submit(Append("inv-1", epoch, [(1, step("a"))]))  # the loop's connection is open
    other.execute("LOCK TABLE journal.entries IN EXCLUSIVE MODE")  # the next statement waits
    step_b = asyncio.create_task(committer.submit(Append("inv-1", epoch, [(2, step("b"))])))
    waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted"
    await until(lambda: other.execute(waiting).fetchone()[0] == 1, "the statement to wait for the lock")

    def release_once_cancelled():  # by the closing loop
        wait_until(lambda: step_b.cancelling() == 1, "the closing loop to cancel the step")
        other.rollback()

    threading.Thread(target=release_once_cancelled, daemon=True).start()

asyncio.run(main())
print([seq for seq, _ in store.entries("inv-1")], flush=True)
"""


def test_an_event_loop_closing_with_a_batch_of_steps_in_flight_sees_the_batch_out(postgres_url):
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", _SHUTDOWN_IN_FLIGHT.format(url=postgres_url)], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "[0, 1, 2]", done.stdout + done.stderr


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_other_batches_are_left_to_the_thread(store, anyio_backend):
    create(store)
    epoch, _ = acquire(store)
    # A claim, and an append of two entries, are not plain steps: nothing is done here.
    assert await store.apply_async([Append("inv-1", epoch, [(1, step("a")), (2, step("b"))])]) is None
    assert await store.apply_async([Append("inv-1", epoch + 1, [(1, step("a"))])]) is None
    assert [seq for seq, _ in store.entries("inv-1")] == [0]


def test_a_claim_skips_an_invocation_whose_rows_another_transaction_holds(store, postgres_url):
    import psycopg

    from journal import Acquire

    create(store)
    with psycopg.connect(postgres_url) as other:  # another worker in the middle of claiming it
        other.execute("SELECT 1 FROM journal.invocations WHERE invocation_id = %s FOR UPDATE", (b"inv-1",))
        outcome = []
        claimer = threading.Thread(target=lambda: outcome.extend(
            store.apply([Acquire("inv-1", "me", "here", 1, 30_000_000, T0)])), daemon=True)
        claimer.start()
        # It gives up at once, rather than waiting for the other transaction to end.
        wait_until(lambda: outcome, "the claim to return while the other transaction still holds the row")
        other.rollback()
    assert isinstance(outcome[0], InvocationBusy) and "being claimed" in str(outcome[0])
    epoch, _ = acquire(store)  # free again: claimed at once
    assert epoch == 1


def test_a_creator_waits_for_another_creating_in_the_same_keys_queue_and_queues_behind_it(store, postgres_url):
    import psycopg

    from journal.backends.postgres._rows import PgTxn
    from journal.kv._rules import _create
    from journal.testing import creation_op as _creation

    first = _creation("first", 1, key="thread-1")
    with psycopg.connect(postgres_url) as other:  # another worker, its creation not committed yet
        _create(PgTxn(other.cursor(), write=True), b"first", first.record, first.started)
        created = []
        creator = threading.Thread(target=lambda: created.append(
            create(store, "second", key="thread-1", at=T0 - 5_000)), daemon=True)  # its clock is behind
        creator.start()
        waits = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        wait_until(lambda: created or other.execute(waits).fetchone()[0] == 1,
                   "the second creator to wait for the first one's lock on the key's queue, or to return")
        assert not created, "the second creator went ahead while the first held the key's queue"
        other.commit()
    creator.join(timeout=30)
    assert created and store.key_queue("thread-1") == ["first", "second"]


def test_a_creation_retried_after_a_deadlock_reads_its_place_in_its_keys_queue_again(store, postgres_url):
    # Two workers create in two keys each, in opposite orders. PostgreSQL breaks the deadlock
    # by rolling one back, and the store retries it whole: the retry must not reuse the place
    # its first try read, or it queues ahead of an invocation committed in between.
    import psycopg

    from journal.backends.postgres._rows import PgTxn
    from journal.kv._rules import _create
    from journal.testing import creation_op as _creation

    def create_in(txn, invocation_id, key):
        op = _creation(invocation_id, 1, key=key, at=T0 + 5_000)  # the other worker's clock is ahead
        _create(txn, invocation_id.encode(), op.record, op.started)

    with psycopg.connect(postgres_url) as other:
        other.execute("SET deadlock_timeout = '60s'")  # the store's session is the one that gives up
        txn = PgTxn(other.cursor(), write=True)
        create_in(txn, "o2", "thread-2")  # holds thread-2's queue
        done = []
        creator = threading.Thread(target=lambda: done.append(
            store.apply([_creation("a", 1, key="thread-1"), _creation("b", 2, key="thread-2")])), daemon=True)
        creator.start()  # places a in thread-1's queue, then waits for thread-2's
        waits = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        wait_until(lambda: other.execute(waits).fetchone()[0] == 1, "the store to wait for thread-2's queue")
        create_in(txn, "o1", "thread-1")  # waits for thread-1's queue: the store's try is rolled back
        other.commit()
    creator.join(timeout=30)
    assert done and [r[1] for r in done[0]] == [True, True]  # both created, on the retry
    assert store.key_queue("thread-1") == ["o1", "a"] and store.key_queue("thread-2") == ["o2", "b"]
    with pytest.raises(InvocationBusy, match="queued behind 'o1'"):
        acquire(store, "a")


def test_every_row_of_one_invocation_is_keyed_by_its_id_first(store):
    rows = store._writer.conn.execute("""
        SELECT c.relname, array_agg(a.attname ORDER BY k.ord)
        FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
        WHERE n.nspname = 'journal' AND i.indisprimary GROUP BY c.relname""").fetchall()
    keys = {table: list(columns) for table, columns in rows}
    for table in ("invocations", "entries", "leases", "promises", "status", "timers"):
        assert keys[table][0] == "invocation_id", (table, keys[table])


def test_a_store_of_the_earlier_key_value_layout_is_refused_untouched(postgres_url):
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA journal")
        for table in ("meta", "invocations", "entries", "leases", "status", "timers", "promises", "state", "keyq"):
            conn.execute(f"CREATE TABLE journal.{table} (k bytea PRIMARY KEY, v bytea NOT NULL)")
        conn.execute("INSERT INTO journal.meta VALUES ('format', '1')")
    with pytest.raises(FormatVersionError, match="format version 1.*journal migrate --db"):
        PostgresStore(postgres_url)
    with psycopg.connect(postgres_url) as conn:
        columns = conn.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = 'journal' "
                               "AND table_name = 'entries' ORDER BY ordinal_position").fetchall()
    assert [c for (c,) in columns] == ["k", "v"]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_lost_connection_of_the_event_loop_leaves_the_batch_to_the_thread_then_opens_again(
        store, postgres_url, anyio_backend):
    import psycopg

    create(store)
    epoch, _ = acquire(store)
    assert await store.apply_async([Append("inv-1", epoch, [(1, step("a"))])]) == [None]
    first = store._aio
    with psycopg.connect(postgres_url, autocommit=True) as admin:  # the server ends that session
        admin.execute("SELECT pg_terminate_backend(%s)", (first._pg.backend_pid,))
    # Not an error: the caller runs the batch on the thread's path, which waits for the server.
    assert await store.apply_async([Append("inv-1", epoch, [(2, step("b"))])]) is None
    assert store.apply([Append("inv-1", epoch, [(2, step("b"))])]) == [None]
    assert await store.apply_async([Append("inv-1", epoch, [(3, step("c"))])]) == [None]
    assert store._aio is not first and [seq for seq, _ in store.entries("inv-1")] == [0, 1, 2, 3]


def test_a_store_used_by_one_event_loop_after_another_sends_steps_from_the_new_one(store):
    import anyio

    create(store)
    epoch, _ = acquire(store)

    async def one_step(seq):
        return await store.apply_async([Append("inv-1", epoch, [(seq, step(str(seq)))])])

    assert anyio.run(one_step, 1) == [None]
    first = store._aio
    assert anyio.run(one_step, 2) == [None]
    assert store._aio is not first and [seq for seq, _ in store.entries("inv-1")] == [0, 1, 2]


def test_a_live_owner_takes_its_locks_again_when_it_renews_after_the_server_ended_their_session(
        store, postgres_url):
    import psycopg

    create(store)
    create(store, "inv-2")
    epoch, _ = acquire(store, owner="holder", ttl_us=3_600_000_000)  # this process, alive, for an hour
    acquire(store, "inv-2", owner="holder", ttl_us=3_600_000_000)
    ended = store._lives.session.conn.info.backend_pid
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        # The server ends that idle session (a pooler restarting in between, an administrator).
        admin.execute("SELECT pg_terminate_backend(%s)", (ended,))
        wait_until(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                         (ended,)).fetchone()[0] == 0, "the lock session to end")
    rival = PostgresStore(postgres_url)
    try:
        # Until the holder renews, it looks dead: a rival may claim one of its invocations.
        rival_epoch, _ = acquire(rival, "inv-2", owner="rival", now=T0 + 1)
        assert rival_epoch == 2
        # The holder's renewal (its lease watcher's next tick) takes the owner's lock again in
        # a new session; the lease it lost meanwhile says so, the one it kept is protected again.
        kept, lost = store.apply([Renew("inv-1", epoch, 3_600_000_000, T0 + 2),
                                  Renew("inv-2", epoch, 3_600_000_000, T0 + 2)])
        assert not isinstance(kept, BaseException)
        assert isinstance(lost, LeaseLost)
        assert store._lives.session.conn.info.backend_pid != ended
        with pytest.raises(InvocationBusy, match="being run"):
            acquire(rival, owner="rival", now=T0 + 3)
    finally:
        rival.close()


def test_the_session_holding_the_owners_locks_is_exempt_from_an_idle_session_timeout(postgres_url):
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        db = admin.execute("SELECT current_database()").fetchone()[0]
        admin.execute(f'ALTER DATABASE "{db}" SET idle_session_timeout = 3600000')  # for new sessions
        try:
            store = PostgresStore(postgres_url)
            try:
                create(store)
                acquire(store, owner="holder")
                assert store._lives.session.conn.execute("SHOW idle_session_timeout").fetchone()[0] == "0"
                with psycopg.connect(postgres_url) as other:  # what every other session gets
                    assert other.execute("SHOW idle_session_timeout").fetchone()[0] == "1h"
            finally:
                store.close()
        finally:
            admin.execute(f'ALTER DATABASE "{db}" RESET idle_session_timeout')


def test_a_claim_after_the_lock_session_was_ended_holds_the_owners_lock_again_first(store, postgres_url):
    import psycopg

    from journal.backends.postgres._rows import owner_lock_key

    create(store)
    create(store, "inv-2")
    acquire(store, owner="holder", ttl_us=3_600_000_000)
    ended = store._lives.session.conn.info.backend_pid
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (ended,))
        wait_until(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                         (ended,)).fetchone()[0] == 0, "the lock session to end")
        # The next claim, long before any renewal, notices the session gone and locks again
        # before it claims: the new lease is protected from the moment it exists.
        acquire(store, "inv-2", owner="holder", ttl_us=3_600_000_000)
        classid, objid = owner_lock_key("holder")
        holders = admin.execute("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                                "AND classid = %s AND objid = %s AND objsubid = 2", (classid, objid)).fetchall()
    assert [pid for (pid,) in holders] == [store._lives.session.conn.info.backend_pid] != [ended]
    rival = PostgresStore(postgres_url)
    try:
        for invocation_id in ("inv-1", "inv-2"):
            with pytest.raises(InvocationBusy, match="being run"):
                acquire(rival, invocation_id, owner="rival", now=T0 + 1)
    finally:
        rival.close()


def test_each_session_gets_the_defaults_a_url_does_not_set():
    from psycopg.conninfo import conninfo_to_dict

    from journal.backends.postgres._connect import conninfo

    one = conninfo_to_dict(conninfo("postgresql://app@db.internal/jobs", "writer"))
    assert one["application_name"] == "journal writer" and one["connect_timeout"] == "5"
    assert one["keepalives_idle"] == "10" and one["tcp_user_timeout"] == "20000"
    assert "target_session_attrs" not in one  # one host: whatever it is
    # Several hosts, in either form: only the one that takes writes will do.
    for url in ("postgresql://app@h1:5432,h2:5433/jobs", "postgresql://app@/jobs?host=h1,h2&port=5432,5433"):
        many = conninfo_to_dict(conninfo(url, "reader"))
        assert many["host"] == "h1,h2" and many["port"] == "5432,5433"
        assert many["target_session_attrs"] == "read-write"
    # What the URL says wins.
    own = conninfo_to_dict(conninfo("postgresql://app@h1,h2/jobs?target_session_attrs=any&connect_timeout=2"
                                    "&application_name=billing", "owners"))
    assert own["target_session_attrs"] == "any" and own["connect_timeout"] == "2"
    assert own["application_name"] == "billing"


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://app:s3cret@db/jobs", "postgresql://app:***@db/jobs"),
    ("postgresql://app:s3cret@h1:5432,h2:5433/jobs?sslmode=require",
     "postgresql://app:***@h1:5432,h2:5433/jobs?sslmode=require"),
    ("postgresql://app@db/jobs?password=s3cret&sslmode=require", "postgresql://app@db/jobs?password=***&sslmode=require"),
    ("postgresql://app@/jobs?host=/run/postgresql", "postgresql://app@/jobs?host=/run/postgresql"),
])
def test_messages_show_a_url_without_its_password(url, shown):
    from journal import redact_url

    assert redact_url(url) == shown


CLOSED_UNDER_A_CALL = """
import sys, threading, time
from journal import open_store
from journal.errors import StoreError

url, rounds = sys.argv[1], int(sys.argv[2])
for i in range(rounds):
    store = open_store(url)
    store.get("warm")  # the reader's connection is open
    started, seen = threading.Event(), []

    def reader():
        started.set()
        try:
            while True:
                store.cancel_requests_made()
                store.get("x")
        except StoreError as exc:
            seen.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    started.wait()
    time.sleep(0.002 * (i % 5))  # closed at different points of the reads
    store.close()
    thread.join()
    assert seen and "is closed" in str(seen[0]), seen
print("ok")
"""


def test_closing_the_store_while_another_thread_reads_waits_for_that_read(postgres_url):
    # A lease watcher's look or renewal runs on a worker thread and goes on after its task is
    # cancelled, so `Engine.open` may close the store while it is inside libpq: closed there,
    # the connection was freed under it, which corrupted the heap (`malloc(): unsorted double
    # linked list corrupted` within a hundred rounds here; in CI, a SIGSEGV a few tests later).
    # In a process of its own, so that a crash fails this test instead of ending the run, with
    # freed memory overwritten (MALLOC_PERTURB_), so that a use after free shows at once.
    done = subprocess.run([sys.executable, "-c", CLOSED_UNDER_A_CALL, postgres_url, "150"],
                          capture_output=True, text=True, timeout=DEADLINE * 2,
                          env={**os.environ, "MALLOC_PERTURB_": "85"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
