"""Small builders shared by the storage tests, and a store double."""

import threading

from journal import (
    HOST,
    Acquire,
    Append,
    InvocationRecord,
    MemoryStore,
    Started,
    Status,
    Step,
    digest,
    encode_entry,
    encode_value,
)

T0 = 1_700_000_000_000_000


def create(store, invocation_id="inv-1", *, value="hello", handler="pkg.mod:agent", key=None, at=T0):
    raw = encode_value(value)
    d = digest(bytes(raw))
    record = InvocationRecord(invocation_id, handler, Status.PENDING, at, at, key, d)
    return store.create(record, encode_entry(Started(handler, raw, at, key, d)))


def acquire(store, invocation_id="inv-1", owner="me", *, pid=None, host=HOST, ttl_us=30_000_000, now=T0):
    import os

    return store.apply_one(Acquire(invocation_id, owner, host, pid or os.getpid(), ttl_us, now))


def step(name="s", value="v", at=T0):
    return encode_entry(Step(name, digest(name), at, encode_value(value)))


def append(store, invocation_id, epoch, *pairs, transition=None):
    return store.apply_one(Append(invocation_id, epoch, list(pairs), transition))


# Everything the runtime may call on a store (the `Store` protocol and the tables).
WATCHED = ("create", "get", "require", "list", "entries", "entry_count", "lease", "live_lease", "resolution",
           "due_timers", "state", "key_queue", "apply", "apply_one", "delete", "wait_for_work", "next_wake",
           "table_get", "table_scan", "table_write")


class NetworkStore(MemoryStore):
    """A store that says its calls wait on the network, and notes each call made on the loop's thread."""

    blocking = True

    def __init__(self):
        super().__init__()
        self.loop_thread = None
        self.on_loop = []

    def __getattribute__(self, name):
        value = super().__getattribute__(name)
        if name in WATCHED:
            loop_thread = super().__getattribute__("loop_thread")
            on_loop = super().__getattribute__("on_loop")

            def watched(*args, **kwargs):
                if threading.get_ident() == loop_thread:
                    on_loop.append(name)
                return value(*args, **kwargs)

            return watched
        return value
