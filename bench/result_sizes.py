"""`python -m bench.result_sizes`: W1 `sync` by the size of what each step returns, paired
and alternating, optionally against a second checkout.

One invocation of `--steps` sequential `async def` steps, each returning `size` bytes, in a
fresh process per sample; each repetition runs every (checkout, size) once, in turn. What
a step journals grows with its result, and so do the pages each commit writes and how
often it grows the data file (docs/performance.md, "Room written ahead of the data").
Prints, per checkout and size, the medians over the repetitions of the mean, median and
99th percentile of a step's time, and the median of the per-repetition ratios against the
first tree.

    python -m bench.result_sizes --tree /tmp/base --tree . --reps 5 --sizes 100,1000,3000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def _child(size: int, steps: int) -> dict:
    import anyio

    from runtime import Context, Engine

    payload = b"x" * size
    took: list[float] = []

    async def step() -> bytes:
        return payload

    async def agent(ctx: Context, n: int) -> int:
        for _ in range(n):
            started = time.perf_counter()
            await ctx.run("step", step)
            took.append(time.perf_counter() - started)
        return n

    async def main(path: str) -> float:
        async with Engine.open(path, durability="sync") as engine:
            await engine.run(agent, 50, id="warm")
            took.clear()
            started = time.perf_counter()
            await engine.run(agent, steps, id="w1")
            return time.perf_counter() - started

    import runtime

    with tempfile.TemporaryDirectory() as tmp:
        wall = anyio.run(main, os.path.join(tmp, "db"))
    took.sort()
    return {"mean_us": wall / steps * 1e6, "median_us": took[len(took) // 2] * 1e6,
            "p99_us": took[int(len(took) * 0.99)] * 1e6, "runtime": runtime.__file__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.result_sizes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="a checkout to run (repeatable)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--sizes", default="100,1000,3000", help="bytes each step returns, comma-separated")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(_child(args.child, args.steps)))
        return 0
    from bench._trees import run_in_tree  # (not at the top: the children run this file as a script)

    trees = [os.path.abspath(t) for t in args.tree] or [os.path.abspath(".")]
    sizes = [int(s) for s in args.sizes.split(",")]
    samples: dict[tuple[str, int], list[dict]] = {(t, s): [] for t in trees for s in sizes}
    here = os.path.dirname(os.path.abspath(__file__))
    for rep in range(args.reps):
        for size in sizes:
            for tree in trees:
                samples[(tree, size)].append(run_in_tree(tree, os.path.join(here, "result_sizes.py"), "--child",
                                                         str(size), "--steps", str(args.steps)))
        print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
    report: dict[str, object] = {"load_average": os.getloadavg()}
    for (tree, size), got in samples.items():
        report[f"{tree} {size} B"] = {key: round(statistics.median(g[key] for g in got), 1)
                                      for key in ("mean_us", "median_us", "p99_us")}
        if tree != trees[0]:
            base = samples[(trees[0], size)]
            ratios = [g["mean_us"] / b["mean_us"] for g, b in zip(got, base, strict=True)]
            report[f"{tree} {size} B / {trees[0]} (mean time a step)"] = {
                "median": round(statistics.median(ratios), 3), "range": [round(min(ratios), 3), round(max(ratios), 3)]}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
