"""`python -m bench`: every workload in every durability mode, beside raw LMDB, in one run.

Each repetition measures the raw LMDB baselines and then every workload, so slow and fast
moments of a shared machine fall on both sides of each ratio. Figures are medians over
the repetitions; the JSON keeps every sample.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from . import _postgres, _raw, _workloads
from ._workloads import MODES

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_JSON = os.path.join(HERE, "results", "latest.json")


class Plan:
    """Sizes and repetition counts (the workload definitions never shrink, only the repetitions)."""

    def __init__(self, quick: bool, reps: int | None, crash_reps: int | None) -> None:
        self.reps = reps or (2 if quick else 9)
        self.crash_reps = crash_reps or (1 if quick else 5)
        self.a1_appends = {"sync": 300, "async": 5000}
        self.a2 = {1: 300, 10: 200, 100: 50}  # appenders -> appends each
        self.w5_suspended = (1_000, 10_000, 100_000)  # suspended invocations under an idle worker


# -- measuring ------------------------------------------------------------------------------------
#
# Every workload sample is paired with raw LMDB samples taken just before and just after it,
# on the same disk: a shared machine drifts over a run (other processes, other disk
# traffic), and a ratio of figures taken a moment apart is steadier than one of two medians
# taken minutes apart. A ratio reported is the median of the per-pair ratios.


def _baselines(parent: str) -> dict[str, float]:
    """The whole raw table, once per repetition (for reference)."""
    return {
        "commit_us": _raw.commit_us(parent=parent),
        "fsynced_commit_us": _raw.fsynced_commit_us(parent=parent),
        "native_sync_commit_us": _raw.native_sync_commit_us(parent=parent),
        "group_commit_50_per_s": _raw.group_commit_per_s(50, parent=parent),
        "group_commit_100_per_s": _raw.group_commit_per_s(100, parent=parent),
        "scan_per_s": _raw.scan_per_s(parent=parent),
        "asyncio_floor_50_per_s": _raw.asyncio_group_commit_per_s(50, parent=parent),
        "asyncio_floor_100_per_s": _raw.asyncio_group_commit_per_s(100, parent=parent),
    }


def _pair_for(key: str, parent: str) -> Callable[[], float]:
    """The raw LMDB figure a workload sample is compared with."""
    workload, mode = key.split("/")
    workload = workload.split()[0]  # "W1 thread" and "W1 async" pair with W1's floor
    if workload in ("A1", "W1"):
        if mode == "sync":
            return lambda: _raw.fsynced_commit_us(100, parent=parent)
        return lambda: _raw.commit_us(2000, parent=parent)
    if workload == "A2":
        return lambda: _raw.group_commit_per_s(100, txns=20, parent=parent)
    if workload == "W2":
        if mode == "sync":
            return lambda: _raw.group_commit_per_s(50, txns=20, parent=parent)
        return lambda: 1e6 / _raw.commit_us(2000, parent=parent)
    if workload == "W4":
        return lambda: _raw.scan_per_s(parent=parent)
    return lambda: 0.0


def measure(plan: Plan, parent: str, only: set[str], log: Callable[[str], None]) -> dict[str, list[dict]]:
    samples: dict[str, list[dict]] = {}

    def record(key: str, fn: Callable[..., dict], *args: Any) -> None:
        if key == "raw":
            samples.setdefault(key, []).append(fn(*args))
            return
        pair = _pair_for(key, parent)
        before = pair()
        sample = fn(*args)
        after = pair()
        # Raw LMDB just before and just after the sample: their mean cancels a steady drift.
        sample["baseline"] = (before + after) / 2
        sample["baseline_before_after"] = [before, after]
        samples.setdefault(key, []).append(sample)

    for rep in range(max(plan.reps, plan.crash_reps)):
        log(f"repetition {rep + 1}: raw LMDB")
        record("raw", _baselines, parent)
        # Rotate the mode order so no mode always runs first (or last) in a repetition.
        modes = MODES[rep % 3:] + MODES[:rep % 3]
        if rep < plan.reps:
            if "A1" in only:
                for mode in ("sync", "async"):
                    record(f"A1/{mode}", _workloads.append_path, parent, mode, plan.a1_appends[mode])
            if "A2" in only:
                for appenders, each in plan.a2.items():
                    record(f"A2/{appenders}", _workloads.group_commit, parent, appenders, each)
            for mode in modes:
                if "W1" in only:
                    log(f"repetition {rep + 1}: W1 {mode}")
                    record(f"W1/{mode}", _workloads.step_overhead, parent, mode)
                    if mode != "exit":
                        for fn in ("thread", "async"):
                            record(f"W1 {fn}/{mode}", _workloads.step_overhead, parent, mode, 1000, fn)
                if "W2" in only:
                    log(f"repetition {rep + 1}: W2 {mode}")
                    record(f"W2/{mode}", _workloads.throughput, parent, mode)
        if rep < plan.crash_reps:
            for mode in modes:
                if "W3" in only:
                    log(f"repetition {rep + 1}: W3 {mode}")
                    record(f"W3/{mode}", _workloads.crash_recovery, parent, mode)
                if "W4" in only:
                    log(f"repetition {rep + 1}: W4 {mode}")
                    record(f"W4/{mode}", _workloads.long_resume, parent, mode)
            if "W5" in only:
                log(f"repetition {rep + 1}: W5 10,000 agents")
                record("W5/sync", _workloads.agent_fleet, parent, "sync")
                for count in plan.w5_suspended:
                    log(f"repetition {rep + 1}: W5 idle worker over {count:,} suspended")
                    record(f"W5-idle/{count}", _workloads.idle_worker, parent, count)
        if rep < plan.reps and "LG" in only:
            from . import _langgraph  # needs the langgraph extra

            savers = _langgraph.SAVERS[rep % 3:] + _langgraph.SAVERS[:rep % 3]
            log(f"repetition {rep + 1}: LG floors")
            samples.setdefault("LG/floors", []).append(_langgraph.floors(parent))
            for mode in modes:
                log(f"repetition {rep + 1}: LG {mode}")
                for saver in savers:
                    samples.setdefault(f"LG/{saver}-{mode}", []).append(_langgraph.loop(parent, saver, mode))
    return samples


# -- summarising ----------------------------------------------------------------------------------


def _median(rows: list[dict], field: str) -> float:
    return statistics.median(row[field] for row in rows)


def _row(workload: str, mode: str, metric: str, unit: str, rows: list[dict], field: str,
         baseline: str | None = None, *, higher_is_better: bool, target: float | None = None,
         target_text: str = "", absolute_target: bool = False, note: str = "") -> dict:
    value = _median(rows, field)
    base_value = ratio = None
    if baseline is not None:
        base_value = _median(rows, "baseline")
        ratio = statistics.median(row[field] / row["baseline"] for row in rows)
    met = None
    if target is not None:
        subject = value if absolute_target or baseline is None else ratio
        met = subject >= target if higher_is_better else subject <= target
    return {
        "workload": workload, "mode": mode, "metric": metric, "unit": unit, "median": value,
        "samples": [row[field] for row in rows], "baseline": baseline, "baseline_median": base_value,
        "baseline_samples": [row["baseline"] for row in rows] if baseline is not None else None,
        "ratio": ratio, "target": target_text or None, "met": met, "note": note,
    }


def _floor_note(samples: dict[str, list[dict]], key: str, field: str, tasks: int | None) -> str:
    """How a group-commit workload compares with the asyncio floor for as many tasks."""
    raw = samples.get("raw", [])
    name = f"asyncio_floor_{tasks}_per_s"
    if tasks is None or not raw or name not in raw[0]:
        return ""
    return f"; {_median(samples[key], field) / _median(raw, name):.0%} of the asyncio floor"


def summarise(samples: dict[str, list[dict]]) -> list[dict]:
    rows = []
    for mode in ("async", "sync"):
        key = f"A1/{mode}"
        if key in samples:
            rows.append(_row(
                "A1 append (store)", mode, "per append", "us", samples[key], "us_per_append",
                "raw commit, no sync" if mode == "async" else "raw commit + fsync", higher_is_better=False,
                target=3.0 if mode == "async" else None, target_text="<= 3x" if mode == "async" else "",
            ))
    for appenders in (1, 10, 100):
        key = f"A2/{appenders}"
        if key in samples:
            rows.append(_row(
                "A2 group commit (store, sync)", f"{appenders} appenders", "throughput", "appends/s",
                samples[key], "appends_per_s", "raw 100 puts/fsynced txn", higher_is_better=True,
                target=0.5 if appenders == 100 else None, target_text=">= 50%" if appenders == 100 else "",
                note=f"{_median(samples[key], 'appends') / max(_median(samples[key], 'fsyncs'), 1):.1f} appends/fsync"
                     + _floor_note(samples, key, "appends_per_s", 100 if appenders == 100 else None),
            ))
    for mode in MODES:
        key = f"W1/{mode}"
        if key in samples:
            rows.append(_row(
                "W1 step overhead", mode, "per step", "us", samples[key], "us_per_step",
                "raw commit + fsync" if mode == "sync" else "raw commit, no sync", higher_is_better=False,
                target={"sync": 1.2, "async": 3.0}.get(mode),
                target_text={"sync": "<= 1.2x", "async": "<= 3x"}.get(mode, ""),
            ))
    for fn, what in (("thread", "plain fn on a thread"), ("async", "async fn")):
        for mode in ("sync", "async"):
            key = f"W1 {fn}/{mode}"
            if key in samples:
                rows.append(_row(f"W1 step overhead, {what}", mode, "per step", "us", samples[key], "us_per_step",
                                 "raw commit + fsync" if mode == "sync" else "raw commit, no sync",
                                 higher_is_better=False))
    for mode in MODES:
        key = f"W2/{mode}"
        if key in samples:
            sync = mode == "sync"
            rows.append(_row(
                "W2 throughput 50x20", mode, "steps/s", "steps/s", samples[key], "steps_per_s",
                "raw 50 puts/fsynced txn" if sync else "raw commits, no sync", higher_is_better=True,
                target=0.5 if sync else None, target_text=">= 50%" if sync else "",
                note=f"{_median(samples[key], 'group_commits'):.0f} group commits"
                     + _floor_note(samples, key, "steps_per_s", 50 if sync else None),
            ))
    for mode in MODES:
        key = f"W3/{mode}"
        if key in samples:
            rows.append(_row(
                "W3 crash recovery", mode, "restart to done", "s", samples[key], "restart_to_done_s",
                higher_is_better=False, note=f"in-process {_median(samples[key], 'recover_s') * 1e3:.1f} ms",
            ))
            worst = max(samples[key], key=lambda s: s["journaled_ran_twice"])
            rows.append(_row(
                "W3 crash recovery", mode, "journaled steps run twice", "steps", [worst], "journaled_ran_twice",
                higher_is_better=False, target=0, target_text="0",
                note=f"worst of {len(samples[key])}; side effects run twice: {max(s['ran_twice'] for s in samples[key])} "
                     f"(journaled before the kill: {_median(samples[key], 'journaled_before_kill'):.0f} of "
                     f"{_median(samples[key], 'lines_before_kill'):.0f} done)",
            ))
    for mode in MODES:
        key = f"W4/{mode}"
        if key in samples:
            rows.append(_row(
                "W4 5,000-step resume", mode, "restart to done", "s", samples[key], "restart_to_done_s",
                higher_is_better=False,
                note=f"in-process {_median(samples[key], 'in_process_s') * 1e3:.1f} ms, of which resume "
                     f"{_median(samples[key], 'resume_s') * 1e3:.1f} ms",
            ))
            rows.append(_row(
                "W4 5,000-step resume", mode, "replay to wait point", "entries/s", samples[key], "entries_per_s",
                "raw cursor scan", higher_is_better=True, target=100_000, target_text=">= 100,000/s",
                absolute_target=True,
                note=f"{_median(samples[key], 'replay_s') * 1e3:.1f} ms for {_median(samples[key], 'entries'):.0f} entries",
            ))
    rows += _w5_rows(samples)
    rows += _langgraph_rows(samples)
    return rows


_SAVER_NAMES = {"journal": "JournalSaver", "sqlite": "SqliteSaver", "memory": "InMemorySaver"}


def _langgraph_rows(samples: dict[str, list[dict]]) -> list[dict]:
    """Time per super-step of each saver; JournalSaver's own cost (its time less InMemorySaver's,
    which does the same LangGraph work and no I/O) against one raw LMDB put+commit+fsync; and
    JournalSaver's over SqliteSaver's. Every ratio pairs figures of the same repetition (the
    savers of a repetition run back to back, right after its floors)."""
    rows = []
    floors = samples.get("LG/floors")
    if floors:
        fsync = [{"us": f["fsynced_commit_us"], "baseline": f["fsynced_commit_us"]} for f in floors]
        rows.append(_row("LG floors", "", "raw put+commit+fsync", "us", fsync, "us", higher_is_better=False))
        rows.append(_row("LG floors", "sync", "the saver's bytes, bare LMDB (2 txns, 1 fsync)", "us",
                         [{"us": f["raw_shaped_us"], "baseline": f["fsynced_commit_us"]} for f in floors], "us",
                         "raw put+commit+fsync", higher_is_better=False))
        rows.append(_row("LG floors", "sync", "JournalSaver's calls alone, no graph", "us",
                         [{"us": f["direct_us"], "baseline": f["fsynced_commit_us"]} for f in floors], "us",
                         "raw put+commit+fsync", higher_is_better=False))
    for mode in MODES:
        for saver, name in _SAVER_NAMES.items():
            key = f"LG/{saver}-{mode}"
            if key in samples:
                rows.append(_row("LG LangGraph 1,000 super-steps", mode, f"{name} per super-step", "us",
                                 samples[key], "us_per_step", higher_is_better=False))
        journal, sqlite = samples.get(f"LG/journal-{mode}"), samples.get(f"LG/sqlite-{mode}")
        memory = samples.get(f"LG/memory-{mode}")
        if journal and memory and floors:
            own = [{"us": j["us_per_step"] - m["us_per_step"], "baseline": f["fsynced_commit_us"]}
                   for j, m, f in zip(journal, memory, floors, strict=False)]
            rows.append(_row("LG LangGraph 1,000 super-steps", mode, "JournalSaver own cost (less InMemorySaver)",
                             "us", own, "us", "raw put+commit+fsync", higher_is_better=False,
                             target=1.3 if mode == "sync" else None, target_text="<= 1.3x" if mode == "sync" else ""))
        if journal and sqlite:
            paired = [{"ratio": j["us_per_step"] / q["us_per_step"], "baseline": 1.0} for j, q in zip(journal, sqlite, strict=False)]
            floor = (f"InMemorySaver/SqliteSaver {statistics.median(m['us_per_step'] / q['us_per_step'] for m, q in zip(memory, sqlite, strict=False)):.2f}"
                     if memory else "")
            row = _row("LG LangGraph 1,000 super-steps", mode, "JournalSaver / SqliteSaver", "x", paired, "ratio",
                       higher_is_better=False, target=0.5 if mode == "sync" else None,
                       target_text="<= 0.5" if mode == "sync" else "", absolute_target=True, note=floor)
            rows.append(row)
    journal_sync, journal_async = samples.get("LG/journal-sync"), samples.get("LG/journal-async")
    if journal_sync and journal_async:
        paired = [{"ratio": a["us_per_step"] / s["us_per_step"], "baseline": 1.0}
                  for a, s in zip(journal_async, journal_sync, strict=False)]
        rows.append(_row("LG LangGraph 1,000 super-steps", "async", "JournalSaver async / sync", "x", paired, "ratio",
                         higher_is_better=False))
    return rows


def _w5_rows(samples: dict[str, list[dict]]) -> list[dict]:
    rows = []
    if "W5/sync" in samples:
        fleet = samples["W5/sync"]
        ideal = _median(fleet, "ideal_seconds")
        rows.append(_row(
            "W5 10,000 agents x 5 steps", "sync", "wall time", "s", fleet, "seconds", higher_is_better=False,
            note=f"ideal {ideal * 1e3:.0f} ms (5 model calls of 20 ms, all overlapping): "
                 f"{_median(fleet, 'seconds') / ideal:.0f}x the ideal; "
                 f"{_median(fleet, 'group_commits'):.0f} group commits",
        ))
        rows.append(_row(
            "W5 10,000 agents x 5 steps", "sync", "throughput", "steps/s", fleet, "steps_per_s",
            higher_is_better=True, target=15_000, target_text=">= 15,000/s", absolute_target=True,
        ))
        rows.append(_row(
            "W5 10,000 agents x 5 steps", "sync", "overhead per step", "us", fleet, "overhead_us_per_step",
            higher_is_better=False, note=f"CPU {_median(fleet, 'cpu_us_per_step'):.0f} us per step",
        ))
        rows.append(_row(
            "W5 10,000 agents x 5 steps", "sync", "peak RSS per in-flight invocation", "KiB", fleet,
            "kib_per_invocation", higher_is_better=False, target=20, target_text="<= 20 KiB", absolute_target=True,
            note=f"peak RSS {_median(fleet, 'peak_rss_mib'):.0f} MiB",
        ))
        rows.append(_row(
            "W5 10,000 agents x 5 steps", "sync", "peak heap per in-flight invocation", "KiB", fleet,
            "anon_kib_per_invocation", higher_is_better=False,
            note="anonymous memory only: without the journal file's pages mapped by LMDB",
        ))
    idle = sorted((int(key.split("/")[1]), rows_) for key, rows_ in samples.items() if key.startswith("W5-idle/"))
    for count, rows_ in idle:
        rows.append(_row(
            "W5 idle worker", f"{count:,} suspended", "RSS", "MiB", rows_, "rss_mib", higher_is_better=False,
            note=f"peak {_median(rows_, 'peak_rss_mib'):.1f} MiB; idle CPU {_median(rows_, 'cpu_ms_per_s'):.0f} ms/s",
        ))
    if len(idle) > 1:
        fewest, most = idle[0], idle[-1]
        growth = [{"growth": b["rss_mib"] / a["rss_mib"] - 1} for a, b in zip(fewest[1], most[1], strict=False)]
        rows.append(_row(
            "W5 idle worker", f"{fewest[0]:,} -> {most[0]:,} suspended", "RSS growth", "%", growth, "growth",
            higher_is_better=False, target=0.05, target_text="<= 5%", absolute_target=True,
        ))
    return rows


def baselines_table(samples: dict[str, list[dict]]) -> list[tuple[str, str]]:
    raw = samples["raw"]
    return [
        ("raw put+commit, no sync", f"{_median(raw, 'commit_us'):.2f} us"),
        ("raw put+commit+fsync (one fdatasync)", f"{_median(raw, 'fsynced_commit_us'):.1f} us"),
        ("raw commit, LMDB sync=True (two fdatasyncs)", f"{_median(raw, 'native_sync_commit_us'):.1f} us"),
        ("raw 50 puts per fsynced txn", f"{_median(raw, 'group_commit_50_per_s'):,.0f} puts/s"),
        ("raw 100 puts per fsynced txn", f"{_median(raw, 'group_commit_100_per_s'):,.0f} puts/s"),
        ("raw cursor scan of 5,000 entries", f"{_median(raw, 'scan_per_s'):,.0f} entries/s"),
        ("asyncio floor: 50 tasks, one put each per fsynced txn",
         f"{_median(raw, 'asyncio_floor_50_per_s'):,.0f} puts/s"),
        ("asyncio floor: 100 tasks, one put each per fsynced txn",
         f"{_median(raw, 'asyncio_floor_100_per_s'):,.0f} puts/s"),
    ]


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit in ("us",):
        return f"{value:,.1f} us"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "s":
        return f"{value * 1e3:,.0f} ms"
    if unit == "steps":
        return f"{value:.0f}"
    if unit in ("KiB", "MiB"):
        return f"{value:,.1f} {unit}"
    if unit == "%":
        return f"{value * 100:+.1f}%"
    return f"{value:,.0f}/s"


def _fmt_ratio(row: dict) -> str:
    if row["ratio"] is None:
        return ""
    if row["unit"].endswith("/s"):
        return f"{row['ratio'] * 100:.1f}%"
    return f"{row['ratio']:.2f}x"


def _fmt_met(row: dict) -> str:
    return {None: "", True: "met", False: "MISSED"}[row["met"]]


def render(rows: list[dict], samples: dict[str, list[dict]], *, markdown: bool = False) -> str:
    header = ["workload", "mode", "metric", "median", "raw baseline (paired)", "ratio", "target", "result", "note"]
    body = []
    for r in rows:
        base = "" if r["baseline"] is None else f"{r['baseline']}: {_fmt(r['baseline_median'], r['unit'])}"
        body.append([r["workload"], r["mode"], r["metric"], _fmt(r["median"], r["unit"]), base,
                     _fmt_ratio(r), r["target"] or "", _fmt_met(r), r["note"]])
    base_rows = baselines_table(samples)
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        lines += ["", "| raw LMDB and the asyncio floor, once per repetition | median |", "|---|---|"]
        lines += [f"| {name} | {value} |" for name, value in base_rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body, strict=False)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in body]
    width = max(len(name) for name, _ in base_rows)
    out += ["", "raw LMDB and the asyncio floor, once per repetition:"]
    out += [f"  {name:{width}s}  {value}" for name, value in base_rows]
    return "\n".join(out)


# -- the machine ------------------------------------------------------------------------------------


def _filesystem(path: str) -> str:
    best = ("", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                _, mount, fstype, *_ = line.split()
                if (path + "/").startswith(mount.rstrip("/") + "/") and len(mount) >= len(best[0]):
                    best = (mount, fstype)
    except OSError:
        pass
    return best[1]


def machine(parent: str) -> dict[str, Any]:
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass

    def version(dist: str) -> str:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as v
        try:
            return v(dist)
        except PackageNotFoundError:
            return "?"

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=os.path.dirname(HERE), capture_output=True, text=True,
                                  check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return "?"

    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "lmdb": version("lmdb"), "msgspec": version("msgspec"), "anyio": version("anyio"),
        "store_dir": parent,
        "filesystem": _filesystem(os.path.realpath(parent)),
        "commit": git("rev-parse", "--short", "HEAD").strip(),
        # Local changes to the code being measured (the figures may not match the commit alone).
        "dirty_files": [line[3:] for line in git("status", "--porcelain", "--untracked-files=no", "--",
                                                 "journal", "runtime", "bench").splitlines()],
    }


def _markdown_page(report: dict, rows: list[dict], samples: dict[str, list[dict]]) -> str:
    info = report["machine"]
    dirty = f" with local changes to {', '.join(info['dirty_files'])}" if info["dirty_files"] else ""
    return "\n".join([
        "# Benchmark results",
        "",
        f"`{report['command']}` at commit {info['commit']}{dirty}, {report['when']}.",
        "",
        f"Machine: {info['cpus']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB, kernel {info['kernel']}, "
        f"{info['filesystem']}; Python {info['python']}, lmdb {info['lmdb']}, msgspec {info['msgspec']}, "
        f"anyio {info['anyio']}. Load average {info['load_average_before'][0]} before the run and "
        f"{info['load_average_after'][0]} after (the machine is shared).",
        "",
        f"Medians of {report['repetitions']} repetitions ({report['crash_repetitions']} for W3, W4 and W5). Each "
        "ratio is the median of per-sample ratios against raw LMDB measured just before and just after "
        "that sample. See docs/performance.md for what each line means.",
        "",
        render(rows, samples, markdown=True),
        "",
    ])


# -- entry point ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (2, and 1 for the crash workloads)")
    parser.add_argument("--reps", type=int, help="repetitions of A1, A2, W1, W2, LG (default 9)")
    parser.add_argument("--crash-reps", type=int, help="repetitions of W3, W4, W5 (default 5)")
    parser.add_argument("--only", default="A1,A2,W1,W2,W3,W4,W5,LG,PG,FW",
                        help="comma-separated workloads to run (PG: the PostgreSQL table, with DBOS; "
                             "FW: the agent frameworks, bench/_frameworks.py)")
    parser.add_argument("--dir", help="where to create the stores (default: a temporary directory)")
    parser.add_argument("--json", default=DEFAULT_JSON, help=f"where to write the results (default {DEFAULT_JSON})")
    parser.add_argument("--markdown", help="also write the table as Markdown to this file")
    args = parser.parse_args(argv)

    plan = Plan(args.quick, args.reps, args.crash_reps)
    only = {w.strip().upper() for w in args.only.split(",") if w.strip()}
    parent = tempfile.mkdtemp(prefix="journal-bench-", dir=args.dir)
    started = time.perf_counter()
    load_before = os.getloadavg()
    if load_before[0] > 1.0:
        print(f"  note: load average {load_before[0]:.2f} before the run; other work on this machine "
              "will show up in the figures", file=sys.stderr)
    try:
        say = lambda text: print(f"  {text}", file=sys.stderr, flush=True)  # noqa: E731
        samples = measure(plan, parent, only, say)
        postgres = _postgres.measure(min(plan.reps, plan.crash_reps), parent, say) if "PG" in only else None
        frameworks = None
        if "FW" in only:
            from . import _frameworks  # needs the pydantic-ai and bench extras

            frameworks = _frameworks.measure(plan.crash_reps, parent, say)
        info = machine(parent)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    info["load_average_before"] = [round(x, 2) for x in load_before]
    info["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    rows = summarise(samples)
    seconds = time.perf_counter() - started
    print(render(rows, samples))
    if postgres is not None:
        print(_postgres.render(postgres))
    framework_rows = []
    if frameworks is not None:
        from . import _frameworks

        print(_frameworks.render(frameworks))
        framework_rows = _frameworks.rows(frameworks)
    print(f"\n{info['cpus']} CPUs ({info['cpu_model']}), {info['filesystem']}, Python {info['python']}, "
          f"lmdb {info['lmdb']}; medians of {plan.reps} (crash workloads {plan.crash_reps}) repetitions; "
          f"{seconds:.0f} s; load average {info['load_average_before'][0]} before, "
          f"{info['load_average_after'][0]} after")
    report = {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": info, "repetitions": plan.reps, "crash_repetitions": plan.crash_reps,
        "seconds": seconds, "rows": rows, "samples": samples, "postgres": postgres,
        "frameworks": {"rows": framework_rows, "samples": frameworks} if frameworks is not None else None,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.json}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(_markdown_page(report, rows, samples))
        print(f"wrote {args.markdown}")
    missed = [r for r in rows + framework_rows if r["met"] is False]
    return 0 if not missed else 1
