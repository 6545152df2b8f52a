"""Claims about processes, tested with real processes: SIGKILL and racing owners."""

import os
import signal
import subprocess
import sys
import textwrap

import anyio

from journal import LmdbStore, Status, check

from ..waiting import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RUN = textwrap.dedent("""
    import sys, anyio, json
    from runtime import Engine, InvocationBusy
    from tests.runtime.handlers import counted_steps
    async def main():
        db, action, inv, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
        async with Engine.open(db) as engine:
            if action == "run":
                out = await engine.run(counted_steps, args, id=inv)
            elif action == "resume-or-busy":
                try:
                    out = await engine.resume(inv)
                except InvocationBusy:
                    out = await engine.wait(inv)
            else:
                out = await engine.resume(inv)
            print(out.status, flush=True)
    anyio.run(main)
""")


def _spawn(db, action, inv, args, **kw):
    import json

    return subprocess.Popen(
        [sys.executable, "-c", RUN, str(db), action, inv, json.dumps(args)],
        env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT, **kw,
    )


def _lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().split()


def test_sigkill_mid_run_then_resume_reruns_no_completed_step(tmp_path):
    log, release = tmp_path / "effects.log", tmp_path / "release"
    # Held after step 25 until released, so that the kill lands mid-run however slow this test is.
    args = {"steps": 30, "log": str(log), "pause": 0.01, "hold_after": 25, "release": str(release)}
    proc = _spawn(tmp_path / "db", "run", "k", args)
    wait_until(lambda: len(_lines(log)) >= 12 or proc.poll() is not None, "12 steps to run")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = _lines(log)
    with LmdbStore(tmp_path / "db") as store:
        journaled = store.entry_count("k") - 1
        assert store.get("k").status == Status.RUNNING  # the dead owner never finished
    assert journaled >= 12 - 1
    release.touch()
    # The dead owner's pid is gone, so another process takes over at once.
    resumed = _spawn(tmp_path / "db", "resume", "k", args, stdout=subprocess.PIPE, text=True)
    out, _ = resumed.communicate(timeout=60)
    assert out.strip() == "completed"
    effects = _lines(log)
    assert sorted(set(effects)) == sorted(f"step-{i}" for i in range(30))
    twice = [e for e in set(effects) if effects.count(e) > 1]
    # At most the one step caught in flight by the kill (ran, not yet committed) runs again.
    assert len(twice) <= 1 and len(before) - journaled <= 1
    with LmdbStore(tmp_path / "db") as store:
        assert check(store) == []


def test_two_processes_racing_to_resume_execute_each_step_once(tmp_path):
    db = tmp_path / "db"
    trials = 50
    for trial in range(trials):
        log = tmp_path / f"effects-{trial}.log"
        args = {"steps": 3, "log": str(log)}

        async def create(trial=trial, args=args):
            from runtime import Engine
            from tests.runtime.handlers import counted_steps

            async with Engine.open(db) as engine:
                await engine.start(counted_steps, args, id=f"race-{trial}")

        anyio.run(create)
    procs = []
    for trial in range(trials):
        args = {"steps": 3, "log": str(tmp_path / f"effects-{trial}.log")}
        for _ in range(2):
            procs.append(_spawn(db, "resume-or-busy", f"race-{trial}", args,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        if len(procs) >= 8:  # bounded parallelism: 2 cores
            for p in procs:
                p.communicate(timeout=120)
            procs = []
    for p in procs:
        p.communicate(timeout=120)
    with LmdbStore(db) as store:
        for trial in range(trials):
            effects = _lines(tmp_path / f"effects-{trial}.log")
            assert sorted(effects) == ["step-0", "step-1", "step-2"], (trial, effects)
            assert store.get(f"race-{trial}").status == Status.COMPLETED
