"""DBOS Transact's queue doing `bench.starts`'s claims, in a process of its own (DBOS is a
singleton): `python -m bench._dbos_queue URL fill N` puts N workflows of priority 10 on the
queue `bench` (a process that listens to no queue, so none runs); `python -m bench._dbos_queue
URL round M` enqueues M of priority 1 likewise, then launches one executor (worker concurrency
16) and times it completing them, and prints one JSON line; `... URL count 0` prints how many
wait. Its system database is URL's database.
"""

from __future__ import annotations

import json
import sys
import time

import sqlalchemy as sa
from dbos import DBOS, DBOSClient, DBOSConfig, EnqueueOptions

QUEUE = "bench"


@DBOS.workflow()
async def trivial(n: int) -> int:
    return n


def _launch(url: str, listen: bool) -> None:
    config: DBOSConfig = {"name": "journal-bench", "system_database_url": url, "run_admin_server": False,
                          "log_level": "WARNING"}
    DBOS(config=config)
    DBOS.listen_queues([QUEUE] if listen else [])
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=16, polling_interval_sec=0.05)


def waiting(url: str) -> int:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT count(*) FROM dbos.workflow_status WHERE queue_name = :q "
                                     "AND status = 'ENQUEUED'"), {"q": QUEUE}).scalar()
    engine.dispose()
    return int(found or 0)


def _enqueue(url: str, ids: list[str], priority: int) -> None:
    """Enqueue `ids` with a client, a thousand to a transaction: none runs (this process
    listens to no queue), as `bench.starts` fills journal's stores."""
    client = DBOSClient(system_database_url=url)
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    for start in range(0, len(ids), 1000):
        with engine.begin() as conn:
            for i, workflow_id in enumerate(ids[start:start + 1000], start):
                options: EnqueueOptions = {"queue_name": QUEUE, "workflow_name": trivial.__qualname__,
                                           "priority": priority, "workflow_id": workflow_id}
                client.enqueue_in_transaction(conn, options, i)
    engine.dispose()
    client.destroy()


def fill(url: str, n: int) -> None:
    import uuid

    _launch(url, listen=False)
    try:
        _enqueue(url, [f"wait-{uuid.uuid4().hex}" for _ in range(n)], 10)
    finally:
        DBOS.destroy()


def round_(url: str, m: int) -> None:
    """M workflows of priority 1 enqueued, then an executor launched and timed until every
    one of them has completed."""
    import uuid

    tag = uuid.uuid4().hex[:8]
    _launch(url, listen=False)
    try:
        _enqueue(url, [f"urgent-{tag}-{i:05d}" for i in range(m)], 1)
    finally:
        DBOS.destroy()
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    done = sa.text("SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE :p AND status = 'SUCCESS'")
    began, cpu = time.perf_counter(), time.process_time()
    _launch(url, listen=True)
    try:
        with engine.connect() as conn:
            while conn.execute(done, {"p": f"urgent-{tag}-%"}).scalar() != m:
                conn.commit()
                time.sleep(0.01)
        took, cpu = time.perf_counter() - began, time.process_time() - cpu
    finally:
        DBOS.destroy()
        engine.dispose()
    print(json.dumps({"per_s": m / took, "seconds": took, "cpu_us": cpu / m * 1e6}))


def main() -> None:
    url, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if what == "fill":
        fill(url, n)
    elif what == "round":
        round_(url, n)
    else:
        print(waiting(url))


if __name__ == "__main__":
    main()
