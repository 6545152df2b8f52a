"""`journal worker --retain`: while the worker runs new invocations, it trims exactly the
finished ones that are due (by status and age, by `journal trim`'s rules), and `journal
check` finds the store clean afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from journal import (
    Cancelled,
    Completed,
    ErrorInfo,
    Failed,
    InvocationRecord,
    LmdbStore,
    SetStatus,
    Started,
    Status,
    Transition,
    digest,
    encode_entry,
    encode_value,
)
from journal.testing import acquire, append, create, creation_op

from .serving import wait_for

AGENTS = Path(__file__).parent / "metrics_agents.py"
DAY = 86_400_000_000


def _finished(store, invocation_id: str, status: Status, at: int, *, parent: str | None = None) -> None:
    raw = encode_value(1)
    handler = f"{AGENTS}:ok"
    record = InvocationRecord(invocation_id, handler, Status.PENDING, at, at, None, digest(bytes(raw)), parent=parent)
    store.create(record, encode_entry(Started(handler, raw, at, None, digest(bytes(raw)), parent)))
    epoch, _ = acquire(store, invocation_id, now=at)
    if status == Status.COMPLETED:
        entry, change = Completed(at, encode_value("ok")), Transition(status, at, result=encode_value("ok"), release=True)
    elif status == Status.FAILED:
        error = ErrorInfo("TerminalError", "no")
        entry, change = Failed(at, error), Transition(status, at, error=error, release=True)
    else:
        entry, change = Cancelled(at, "stop"), Transition(status, at, release=True)
    append(store, invocation_id, epoch, (1, encode_entry(entry)), transition=change)


def _journal(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args, "--db", db], capture_output=True, text=True, timeout=120)


def test_a_worker_trims_exactly_what_is_due_while_it_works_and_check_is_clean(tmp_path):
    db = str(tmp_path / "db")
    now = time.time_ns() // 1000
    due, kept = set(), set()
    with LmdbStore(db) as store:
        for n in range(30):
            _finished(store, f"c-old-{n}", Status.COMPLETED, now - 8 * DAY - n)
            due.add(f"c-old-{n}")
            _finished(store, f"c-new-{n}", Status.COMPLETED, now - 6 * DAY - n)
            kept.add(f"c-new-{n}")
        for n in range(10):
            _finished(store, f"f-old-{n}", Status.FAILED, now - 31 * DAY - n)
            _finished(store, f"f-new-{n}", Status.FAILED, now - 20 * DAY - n)
            _finished(store, f"x-old-{n}", Status.CANCELLED, now - 8 * DAY - n)
            _finished(store, f"x-new-{n}", Status.CANCELLED, now - 1 * DAY - n)
            due |= {f"f-old-{n}", f"x-old-{n}"}
            kept |= {f"f-new-{n}", f"x-new-{n}"}
        # An old child whose parent is still waiting: the parent may read it again, so it stays.
        create(store, "parent", handler=f"{AGENTS}:ok", at=now)
        epoch, _ = acquire(store, "parent", now=now)
        store.apply_one(SetStatus("parent", Transition(Status.SUSPENDED, now, waiting="later", release=True), epoch))
        _finished(store, "old-child", Status.COMPLETED, now - 9 * DAY, parent="parent")
        kept |= {"parent", "old-child"}
    # The work the worker does meanwhile: fifty new invocations.
    with LmdbStore(db) as store:
        store.apply([creation_op(f"work-{n}", n, handler=f"{AGENTS}:ok", at=now + n) for n in range(50)])
    kept |= {f"work-{n}" for n in range(50)}

    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "cli", "worker", "--db", db, "-q",
                                   "--retain", "completed=7d,failed=30d,cancelled=7d"], stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        def listed() -> set[str]:
            done = _journal("ls", "--json", db=db)
            assert done.returncode == 0, done.stderr
            return {d["id"] for d in json.loads(done.stdout)}

        def settled() -> bool:
            statuses = {d["id"]: d["status"] for d in json.loads(_journal("ls", "--json", db=db).stdout)}
            return not (set(statuses) & due) and all(statuses.get(f"work-{n}") == "completed" for n in range(50))

        wait_for(settled, timeout=120, what="the due invocations to be trimmed and the work to be done")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        finally:
            worker.kill()  # one that did not stop is a failure, never a process left behind
            worker.wait()
    assert worker.returncode == 0, log.read_text()
    assert listed() == kept
    checked = _journal("check", db=db)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert os.path.exists(db)
