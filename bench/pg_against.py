"""W1 and W2 on PostgreSQL, this checkout against another one, paired: `python -m bench.pg_against TREE`.

TREE is another checkout of journal (`git worktree add /tmp/base COMMIT`), run with this
interpreter and `PYTHONPATH=TREE`. One throwaway server (fsync on, as `python -m bench
--only PG`) serves both; each sample is a fresh process of one checkout on fresh
databases, and the two checkouts alternate (ABBA...), so that the machine's drift falls
on both alike. Per sample, with the handler timing itself:

- W1: one invocation of 200 sequential no-op steps (`sync` and `async`): wall time and the
  process's CPU time per step;
- W2: 50 concurrent invocations of 20 steps: steps per second, and CPU time per step.

Then, once per checkout on a server that logs every statement, the statements the server
received per W1 step (runs of 100 and 200 steps, the difference over 100): a count no
load on the machine changes. Prints medians of `--reps` samples each and the ratios
(this checkout / TREE): the ratio of the medians and the median of the paired ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from .pgserver import PgServer

HERE = str(Path(__file__).resolve().parent.parent)
# Run in the checkout under test: its own runtime, store and bench._agents. A checkout
# whose ctx.run has no `inline=` runs a plain step function on the loop already.
_CHILD = r'''
import anyio, inspect, json, sys, time
from bench import _agents
from journal import Status
from runtime import Context, Engine

INLINE = {"inline": True} if "inline" in inspect.signature(Context.run).parameters else {}
took = {}

async def steps(ctx, n):
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        await ctx.run("step", _agents.noop, **INLINE)
    took[ctx.invocation_id] = (time.perf_counter() - wall, time.process_time() - cpu)
    return n

async def w1(url, mode, n):
    async with Engine.open(url, durability=mode) as engine:
        outcome = await engine.run(steps, n)
    assert outcome.status == Status.COMPLETED, outcome
    wall, cpu = took.pop(outcome.id)
    return wall / n * 1e6, cpu / n * 1e6

async def w2(url, mode, invocations, n):
    async with Engine.open(url, durability=mode) as engine:
        async def one(i):
            assert (await engine.run(steps, n, id=f"w2-{i}")).status == Status.COMPLETED
        wall, cpu = time.perf_counter(), time.process_time()
        async with anyio.create_task_group() as tg:
            for i in range(invocations):
                tg.start_soon(one, i)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return invocations * n / wall, cpu / (invocations * n) * 1e6

what, urls, w1_steps = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
out = {}
if what == "sample":
    for mode in ("sync", "async"):
        out[f"W1 {mode} us/step"], out[f"W1 {mode} CPU us/step"] = anyio.run(w1, urls.pop(), mode, w1_steps)
        out[f"W2 {mode} steps/s"], out[f"W2 {mode} CPU us/step"] = anyio.run(w2, urls.pop(), mode, 50, 20)
else:
    anyio.run(w1, urls.pop(), "sync", w1_steps)
print(json.dumps(out))
'''


def _child(tree: str, what: str, urls: list[str], w1_steps: int = 200) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=tree)
    done = subprocess.run([sys.executable, "-c", _CHILD, what, json.dumps(urls), str(w1_steps)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"the run in {tree} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.splitlines()[-1]))


def statements_per_step(tree: str) -> float:
    """Statements the server logged for a W1 run of 200 steps, less those of 100, over 100."""
    counts = []
    for steps in (100, 200):
        server = PgServer(settings={"log_statement": "'all'"}).start()
        try:
            _child(tree, "statements", [server.new_database()], steps)
            with open(os.path.join(str(server.dir), "log"), errors="replace") as f:
                counts.append(len(re.findall(r"LOG:  (?:statement|execute [^:]*): ", f.read())))
        finally:
            server.stop()
    return (counts[1] - counts[0]) / 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", help="the other checkout (a directory with journal/, runtime/ and bench/)")
    parser.add_argument("--reps", type=int, default=10, help="samples of each checkout (default 10)")
    parser.add_argument("--json", metavar="PATH", help="write every sample there")
    args = parser.parse_args()
    trees = {"this": HERE, "other": os.path.abspath(args.tree)}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    server = PgServer(fsync=True).start()
    try:
        for rep in range(args.reps):
            for name in (("this", "other") if rep % 2 == 0 else ("other", "this")):
                sample = _child(trees[name], "sample", [server.new_database() for _ in range(4)])
                samples[name].append(sample)
                print(f"  {rep + 1}/{args.reps} {name}: " + ", ".join(f"{k} {v:.0f}" for k, v in sample.items()),
                      file=sys.stderr, flush=True)
    finally:
        server.stop()
    print(f"this checkout {trees['this']} against {trees['other']}: medians of {args.reps} alternating samples each")
    for key in samples["this"][0]:
        this = statistics.median(s[key] for s in samples["this"])
        other = statistics.median(s[key] for s in samples["other"])
        paired = statistics.median(a[key] / b[key] for a, b in zip(samples["this"], samples["other"], strict=True))
        print(f"  {key:20} this {this:9.1f}  other {other:9.1f}  ratio of medians {this / other:.3f}, "
              f"median of paired ratios {paired:.3f}")
    statements = {name: statements_per_step(tree) for name, tree in trees.items()}
    print(f"  statements the server received per W1 step: this {statements['this']:.2f}, "
          f"other {statements['other']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"trees": trees, "samples": samples, "statements_per_step": statements}, f, indent=1)


if __name__ == "__main__":
    main()
