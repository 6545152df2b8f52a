"""Small builders shared by the storage tests."""

from journal import (
    HOST,
    Acquire,
    Append,
    InvocationRecord,
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
