"""The live channel of every backend (`Store.live`): what a follower receives of the chunks a
running step sends, in order, once each, and what it never receives."""

from __future__ import annotations

import select

from journal import LiveFeed, LmdbStore, Sent

from ..waiting import wait_until


def _take_until(feed: LiveFeed, count: int) -> list:
    got: list = []

    def enough() -> bool:
        select.select([feed.bell], [], [], 0.05)  # woken by the bell, not by polling on a timer
        got.extend(feed.take())
        return len(got) >= count

    wait_until(enough, f"{count} chunks")
    return got


def test_a_follower_gets_each_chunk_once_in_order(store):
    feed = LiveFeed.open(store, "inv")
    try:
        channel = store.live()
        for n in range(5):
            channel.publish(Sent("inv", 1, 1, 1, n, f"piece {n}"))
        channel.publish(Sent("other", 1, 1, 1, 0, "not for this follower"))
        channel.flush()
        got = _take_until(feed, 5)
        assert [(c.seq, c.attempt, c.index, c.data) for c in got] == [(1, 1, n, f"piece {n}") for n in range(5)]
        assert all(c.invocation_id == "inv" for c in got)
        channel.publish(Sent("inv", 1, 1, 1, 5, b"\x00bytes"))
        channel.flush()
        assert [c.data for c in _take_until(feed, 1)] == [b"\x00bytes"]
    finally:
        feed.close()


def test_a_later_attempt_replaces_an_earlier_one_and_the_earlier_ones_stragglers_are_dropped(store):
    feed = LiveFeed.open(store, "inv")
    try:
        channel = store.live()
        channel.publish(Sent("inv", 2, 1, 1, 0, "first try"))
        channel.publish(Sent("inv", 2, 1, 2, 0, "second try"))
        channel.publish(Sent("inv", 2, 1, 1, 1, "late piece of the first try"))
        channel.publish(Sent("inv", 2, 2, 1, 0, "after a crash: a new execution"))
        channel.publish(Sent("inv", 2, 2, 1, 0, "the same chunk again"))
        channel.flush()
        got = _take_until(feed, 3)
        assert [(c.attempt, c.index, c.data) for c in got] == [
            (1, 0, "first try"), (2, 0, "second try"), (1, 0, "after a crash: a new execution")]
    finally:
        feed.close()


def test_chunks_of_a_running_step_are_kept_for_a_late_follower_on_lmdb(tmp_path):
    """LMDB keeps a running step's chunks, so a follower that starts after they were sent reads
    them (PostgreSQL's NOTIFY reaches those who listen when it is sent)."""
    with LmdbStore(tmp_path / "db") as sender, LmdbStore(tmp_path / "db") as follower:
        channel = sender.live()
        channel.publish(Sent("inv", 3, 1, 1, 0, "sent before anyone followed"))
        channel.flush()
        feed = LiveFeed.open(follower, "inv")
        try:
            assert [c.data for c in _take_until(feed, 1)] == ["sent before anyone followed"]
        finally:
            feed.close()


def test_chunks_of_a_running_step_are_kept_for_a_late_follower_on_postgres(postgres_url):
    """PostgreSQL keeps them in an unlogged table beside the NOTIFY: a follower that starts
    after they were sent reads them, then the ones notified, each once; a committed step's go."""
    from journal import PostgresStore

    with PostgresStore(postgres_url) as sender, PostgresStore(postgres_url) as follower:
        channel = sender.live()
        for n in range(3):
            channel.publish(Sent("inv", 3, 1, 1, n, f"before {n}"))
        channel.flush()
        feed = LiveFeed.open(follower, "inv")
        try:
            channel.publish(Sent("inv", 3, 1, 1, 3, "after"))
            channel.flush()
            got = _take_until(feed, 4)
            assert [c.data for c in got] == ["before 0", "before 1", "before 2", "after"]
        finally:
            feed.close()
        channel.end_step("inv", 3)
        channel.flush()
        late = LiveFeed.open(follower, "inv")
        try:
            select.select([late.bell], [], [], 0.2)
            assert late.take() == []  # the step committed: its entry holds its result
        finally:
            late.close()
