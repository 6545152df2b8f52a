"""The uncontended path of `journal/limits/_logic.py::acquire` (`_free`, then `_grant`) decides
exactly what the general pass would: random histories of acquisitions, releases, pauses and
dead holders, over concurrency, rate and tokens rules, give the same answers and leave the
same tables with it as without it."""

import random

import pytest

from journal.limits import LimitRule, Request, Window, _logic
from journal.limits._table import MemoryLimits


def _history(seed: int) -> tuple[list[object], list[object]]:
    rng = random.Random(seed)
    table = MemoryLimits()

    def txn():
        return table._txn(table._tables)

    for name in ("a", "b", "t:*"):
        rule = LimitRule(concurrency=rng.choice([None, 1, 2, 3]),
                         rate=rng.choice([None, Window(rng.randint(1, 4), rng.choice([0.05, 1.0]))]),
                         tokens=rng.choice([None, Window(rng.randint(50, 300), rng.choice([0.05, 1.0]))]))
        if rule == LimitRule():
            rule = LimitRule(concurrency=2)
        _logic.set_rule(txn(), name, rule)
    known = _logic.rules(txn())
    alive_pids = {1, 2}

    def alive(owner: str, host: str, pid: int) -> bool:
        return pid in alive_pids

    answers: list[object] = []
    held: list[tuple[str, tuple[str, ...]]] = []
    now = 1_000_000_000
    for _ in range(300):
        now += rng.choice([0, 1, 100, 5000, 20000, 300000])
        kind = rng.random()
        if kind < 0.5 or not held:
            names = tuple(sorted({rng.choice(["a", "b", "t:x", "t:y"]) for _ in range(rng.randint(1, 3))}))
            request = Request(f"h{rng.randint(0, 30)}", names, "owner", "host", rng.choice([1, 2, 3]),
                              rng.choice([0, 10, 100]), rng.randint(0, 2))
            answers.append(_logic.acquire(txn(), request, now, alive, known if rng.random() < 0.5 else None))
            held.append((request.hid, names))
        elif kind < 0.9:
            hid, names = held.pop(rng.randrange(len(held)))
            answers.append(_logic.release(txn(), hid, names, rng.choice([None, 0, 50, 500]), now,
                                          known if rng.random() < 0.5 else None))
        else:
            answers.append(_logic.pause(txn(), (rng.choice(["a", "b", "t:x"]),), now + rng.choice([1000, 100000])))
        if rng.random() < 0.02:
            alive_pids.discard(rng.choice([1, 2]))
    return answers, [(name, sorted(t.data.items())) for name, t in sorted(table._tables.items())]


@pytest.mark.parametrize("seed", range(40))
def test_the_uncontended_path_decides_what_the_general_pass_would(seed, monkeypatch):
    free = _logic._free
    granted = []

    def counted(*args):
        answer = free(*args)
        granted.append(answer)
        return answer

    monkeypatch.setattr(_logic, "_free", counted)
    fast = _history(seed)
    monkeypatch.setattr(_logic, "_free", lambda *args: False)
    assert _history(seed) == fast
    assert any(granted)  # (the history went through the uncontended path)
