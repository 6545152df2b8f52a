"""`python -m bench` summarises what it measured: every workload it ran gets its row and its
ratio to the floor it was paired with, whichever workloads `--only` picked."""

from bench import _runner


def _sample(value: float, floor: float, field: str = "us_per_step") -> dict:
    return {field: value, "baseline": floor, "baseline_before_after": [floor, floor]}


def test_the_w1_variants_are_paired_with_a_measured_floor(tmp_path):
    # `--only W1,W2` once divided by zero: the thread and async variants had no floor.
    for key in ("W1 thread/async", "W1 async/async"):
        assert _runner._pair_for(key, str(tmp_path))() > 0


def test_summarising_w1_and_w2_alone_gives_every_ratio():
    samples = {"raw": [{}]}
    for mode in ("sync", "async", "exit"):
        samples[f"W1/{mode}"] = [_sample(300.0, 200.0)]
        samples[f"W2/{mode}"] = [{**_sample(5000.0, 10000.0, "steps_per_s"), "group_commits": 22}]
    for fn in ("thread", "async"):
        for mode in ("sync", "async"):
            samples[f"W1 {fn}/{mode}"] = [_sample(400.0, 200.0)]
    rows = {(row["workload"], row["mode"]): row for row in _runner.summarise(samples)}
    assert rows[("W1 step overhead", "sync")]["ratio"] == 1.5
    assert rows[("W1 step overhead, plain fn on a thread", "sync")]["ratio"] == 2.0
    assert rows[("W2 throughput 50x20", "sync")]["ratio"] == 0.5


def test_langgraph_rows_put_the_savers_beside_their_floors():
    floors = [{"fsynced_commit_us": 200.0, "raw_shaped_us": 220.0, "direct_us": 300.0}]
    samples = {"LG/floors": floors}
    for mode, (journal, memory) in {"sync": (900.0, 600.0), "async": (650.0, 600.0)}.items():
        samples[f"LG/journal-{mode}"] = [{"us_per_step": journal}]
        samples[f"LG/memory-{mode}"] = [{"us_per_step": memory}]
        samples[f"LG/sqlite-{mode}"] = [{"us_per_step": 1200.0}]
    rows = {(row["workload"], row["mode"], row["metric"]): row for row in _runner.summarise(samples)}
    own = rows[("LG LangGraph 1,000 super-steps", "sync", "JournalSaver own cost (less InMemorySaver)")]
    assert (own["median"], own["ratio"], own["met"]) == (300.0, 1.5, False)
    assert rows[("LG floors", "sync", "JournalSaver's calls alone, no graph")]["ratio"] == 1.5
    assert rows[("LG LangGraph 1,000 super-steps", "async", "JournalSaver async / sync")]["median"] == 650 / 900
