"""`python -m bench.plain_pairs`: W1 and W2 (`sync`) with a plain step function (run on the
step threads) and with an `async def` one, paired and alternating, optionally against a
second checkout.

W1 is one invocation of `--steps` sequential no-op steps (µs a step); W2 is
`--invocations` concurrent invocations of `--w2-steps` steps each (steps a second). Each
repetition runs every (checkout, workload, function) once, in a fresh process each and in
an order that rotates from one repetition to the next, so a burst of load on this shared
machine falls on all of them alike. It prints the medians and, for each repetition, the
ratios plain / async within a checkout and checkout / the first tree for the same line,
then their medians, of the wall-clock time and of this process's CPU time per step (all
threads; steadier than the wall clock when other work shares the machine).

`--tree PATH` (repeatable) names the checkouts: each runs with PATH first on its
PYTHONPATH, so `git worktree add /tmp/base COMMIT` then `--tree /tmp/base --tree .`
compares a commit with this one. The first tree is the base of the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

PAYLOAD = b"x" * 100


def _plain() -> bytes:
    return PAYLOAD


async def _async() -> bytes:
    return PAYLOAD


def _child(workload: str, fn: str, mode: str, steps: int, invocations: int, w2_steps: int) -> dict:
    import anyio

    from runtime import Context, Engine

    step = _plain if fn == "plain" else _async

    async def agent(ctx: Context, n: int) -> int:
        for _ in range(n):
            await ctx.run("step", step)
        return n

    async def w1(path: str) -> dict:
        async with Engine.open(path, durability=mode) as engine:
            await engine.run(agent, 20, id="warm")
            cpu, started = time.process_time(), time.perf_counter()
            outcome = await engine.run(agent, steps, id="w1")
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert outcome.result == steps, outcome
        return {"value": wall / steps * 1e6, "cpu_us": cpu / steps * 1e6}

    async def w2(path: str) -> dict:
        async with Engine.open(path, durability=mode) as engine:
            await engine.run(agent, 20, id="warm")
            results = []

            async def one(i: int) -> None:
                results.append((await engine.run(agent, w2_steps, id=f"w2-{i}")).result)

            cpu, started = time.process_time(), time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(invocations):
                    tg.start_soon(one, i)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert results == [w2_steps] * invocations, results
        total = invocations * w2_steps
        return {"value": total / wall, "cpu_us": cpu / total * 1e6}

    import runtime

    with tempfile.TemporaryDirectory() as tmp:
        return dict(anyio.run(w1 if workload == "W1" else w2, tmp + "/db"), runtime=runtime.__file__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plain_pairs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="a checkout to run (repeatable)")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--mode", default="sync", choices=("sync", "async", "exit"))
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--invocations", type=int, default=50)
    parser.add_argument("--w2-steps", type=int, default=20)
    parser.add_argument("--only", default="W1,W2")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "FN"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(*args.child, args.mode, args.steps, args.invocations, args.w2_steps)))
        return 0
    from bench._trees import run_in_tree  # (not at the top: the children run this file as a script)

    trees = [os.path.abspath(t) for t in args.tree] or [os.path.abspath(".")]
    lines = [(tree, workload, fn) for tree in trees for workload in args.only.split(",") for fn in ("plain", "async")]
    samples: dict[tuple[str, str, str], list[float]] = {line: [] for line in lines}
    cpu: dict[tuple[str, str, str], list[float]] = {line: [] for line in lines}  # this process's CPU µs a step
    here = os.path.dirname(os.path.abspath(__file__))
    for rep in range(args.reps):
        shift = rep % len(lines)
        for tree, workload, fn in lines[shift:] + lines[:shift]:
            got = run_in_tree(tree, os.path.join(here, "plain_pairs.py"), "--child", workload, fn, "--mode",
                              args.mode, "--steps", str(args.steps), "--invocations", str(args.invocations),
                              "--w2-steps", str(args.w2_steps))
            samples[(tree, workload, fn)].append(got["value"])
            cpu[(tree, workload, fn)].append(got["cpu_us"])
        print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
    report: dict[str, object] = {"load_average": os.getloadavg()}
    for (tree, workload, fn), values in samples.items():
        unit = "us_per_step" if workload == "W1" else "steps_per_s"
        report[f"{tree} {workload} {fn} {unit}"] = {"median": round(statistics.median(values), 1),
                                                      "samples": [round(v, 1) for v in values]}
        report[f"{tree} {workload} {fn} cpu_us_per_step"] = round(statistics.median(cpu[(tree, workload, fn)]), 1)
    for tree in trees:
        for workload in args.only.split(","):
            # plain / async in time per step: W2's rates are inverted so that > 1 means plain is dearer
            ratios = [(p / a) if workload == "W1" else (a / p)
                      for p, a in zip(samples[(tree, workload, "plain")], samples[(tree, workload, "async")], strict=True)]
            report[f"{tree} {workload} plain/async (time per step)"] = round(statistics.median(ratios), 3)
            ratios = [p / a for p, a in zip(cpu[(tree, workload, "plain")], cpu[(tree, workload, "async")], strict=True)]
            report[f"{tree} {workload} plain/async (CPU per step)"] = round(statistics.median(ratios), 3)
    base = trees[0]
    for tree in trees[1:]:
        for workload in args.only.split(","):
            for fn in ("plain", "async"):
                ratios = [(t / b) if workload == "W1" else (b / t)
                          for t, b in zip(samples[(tree, workload, fn)], samples[(base, workload, fn)], strict=True)]
                report[f"{workload} {fn}: {tree} / {base} (time per step)"] = round(statistics.median(ratios), 3)
                ratios = [t / b for t, b in zip(cpu[(tree, workload, fn)], cpu[(base, workload, fn)], strict=True)]
                report[f"{workload} {fn}: {tree} / {base} (CPU per step)"] = round(statistics.median(ratios), 3)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
