"""The rules of `Store.limits()`, as pytest tests: `StoreContract` runs them on every backend."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from .. import HOST
from ..limits import Blocked, Granted, LimitError, LimitRule, Request, Window


def _req(hid: str, *names: str, tokens: int = 0, priority: int = 0, owner: str = "me", pid: int | None = None,
         label: str = "", claim: int = 0) -> Request:
    return Request(hid, tuple(sorted(names)), owner, HOST, os.getpid() if pid is None else pid, tokens, priority, label,
                   None, claim)


def _view(store: Any, name: str) -> Any:
    return next(v for v in store.limits().ls() if v.name == name)


class LimitsContract:
    """Tests of the limits every store keeps (mixed into `StoreContract`)."""

    def test_limit_rules_are_set_listed_and_removed(self, store: Any) -> None:
        limits = store.limits()
        limits.set("openai", LimitRule(concurrency=3, rate=Window(60, 60.0), tokens=Window(40_000, 60.0)))
        limits.set("tenant:*", LimitRule(concurrency=2))
        assert limits.rules()["openai"] == LimitRule(3, Window(60, 60.0), Window(40_000, 60.0))
        assert limits.rule_for("tenant:acme") == LimitRule(concurrency=2)
        assert limits.rule_for("tenant") is None and limits.rule_for("other") is None
        assert limits.remove("tenant:*") is True and limits.remove("tenant:*") is False
        assert limits.rule_for("tenant:acme") is None

    def test_a_rule_that_limits_nothing_or_a_bad_name_is_refused(self, store: Any) -> None:
        with pytest.raises(LimitError, match="at least one of"):
            store.limits().set("x", LimitRule())
        with pytest.raises(LimitError, match=r"'\*' is allowed only"):
            store.limits().set("a*b", LimitRule(concurrency=1))

    def test_concurrency_is_held_exactly_and_waiters_go_in_order(self, store: Any) -> None:
        limits = store.limits()
        limits.set("db", LimitRule(concurrency=2))
        assert limits.acquire(_req("a", "db")) == Granted()
        assert limits.acquire(_req("b", "db")) == Granted()
        assert limits.acquire(_req("b", "db")) == Granted()  # idempotent: the same hold again
        first = limits.acquire(_req("c", "db"))
        assert isinstance(first, Blocked) and first.names == ("db",) and first.retry_at is None
        later = limits.acquire(_req("d", "db"))
        assert isinstance(later, Blocked) and later.ahead == 1
        assert _view(store, "db").in_use == 2 and _view(store, "db").waiting == 2
        limits.release("a", ("db",))
        assert isinstance(limits.acquire(_req("d", "db")), Blocked)  # c arrived first
        assert limits.acquire(_req("c", "db")) == Granted()
        limits.release("b", ("db",))
        assert limits.acquire(_req("d", "db")) == Granted()

    def test_a_higher_priority_waiter_goes_first(self, store: Any) -> None:
        limits = store.limits()
        limits.set("db", LimitRule(concurrency=1))
        assert limits.acquire(_req("a", "db")) == Granted()
        assert isinstance(limits.acquire(_req("low", "db")), Blocked)
        assert isinstance(limits.acquire(_req("high", "db", priority=5)), Blocked)
        limits.release("a", ("db",))
        assert isinstance(limits.acquire(_req("low", "db")), Blocked)
        assert limits.acquire(_req("high", "db", priority=5)) == Granted()

    def test_a_prefix_rule_counts_each_name_apart(self, store: Any) -> None:
        limits = store.limits()
        limits.set("tenant:*", LimitRule(concurrency=1))
        assert limits.acquire(_req("a", "tenant:a")) == Granted()
        assert limits.acquire(_req("b", "tenant:b")) == Granted()
        assert isinstance(limits.acquire(_req("a2", "tenant:a")), Blocked)
        assert {v.name for v in limits.ls()} >= {"tenant:*", "tenant:a", "tenant:b"}

    def test_a_rate_holds_in_every_window(self, store: Any) -> None:
        limits = store.limits()
        limits.set("api", LimitRule(rate=Window(2, 0.5)))
        started = time.time()
        assert limits.acquire(_req("a", "api")) == Granted()
        assert limits.acquire(_req("b", "api")) == Granted()
        blocked = limits.acquire(_req("c", "api"))
        assert isinstance(blocked, Blocked) and blocked.retry_at is not None
        assert blocked.retry_at / 1e6 >= started + 0.5 - 0.05
        limits.release("a", ("api",))  # releasing frees no rate unit: the window does
        assert isinstance(limits.acquire(_req("c", "api")), Blocked)
        deadline = time.time() + 10
        while not isinstance(limits.acquire(_req("c", "api")), Granted):
            assert time.time() < deadline, "the window never moved on"
            time.sleep(0.02)
        assert time.time() >= started + 0.5

    def test_tokens_are_reserved_then_settled_by_what_was_used(self, store: Any) -> None:
        limits = store.limits()
        limits.set("llm", LimitRule(tokens=Window(1000, 60.0)))
        assert limits.acquire(_req("a", "llm", tokens=800)) == Granted()
        assert isinstance(limits.acquire(_req("b", "llm", tokens=300)), Blocked)
        limits.release("a", ("llm",), used_tokens=200)  # it used less: the rest is given back
        assert _view(store, "llm").tokens_used == 200
        assert limits.acquire(_req("b", "llm", tokens=300)) == Granted()
        limits.release("b", ("llm",), used_tokens=900)  # more than estimated: charged
        assert _view(store, "llm").tokens_used == 1100
        assert isinstance(limits.acquire(_req("c", "llm", tokens=1)), Blocked)

    def test_a_pause_stops_every_grant_until_it_ends(self, store: Any) -> None:
        limits = store.limits()
        limits.set("llm", LimitRule(concurrency=10))
        until = int((time.time() + 60) * 1e6)
        assert limits.pause(("llm", "unlimited"), until) == ["llm"]
        blocked = limits.acquire(_req("a", "llm"))
        assert isinstance(blocked, Blocked) and blocked.retry_at == until
        assert _view(store, "llm").paused_until == until

    def test_a_name_without_a_rule_limits_nothing(self, store: Any) -> None:
        for i in range(5):
            assert store.limits().acquire(_req(f"h{i}", "nobody")) == Granted()

    def test_several_names_are_taken_all_or_none(self, store: Any) -> None:
        limits = store.limits()
        limits.set("a", LimitRule(concurrency=1))
        limits.set("b", LimitRule(concurrency=1))
        assert limits.acquire(_req("x", "b")) == Granted()
        blocked = limits.acquire(_req("y", "a", "b"))
        assert isinstance(blocked, Blocked) and blocked.names == ("b",)
        assert _view(store, "a").in_use == 0  # nothing of `a` was taken meanwhile
        limits.release("x", ("b",))
        assert limits.acquire(_req("y", "a", "b")) == Granted()
        assert _view(store, "a").in_use == 1 and _view(store, "b").in_use == 1

    def test_a_dead_holders_units_come_back(self, store: Any) -> None:
        if store.path is None:
            pytest.skip("a store in one process's memory outlives none of them")
        limits = store.limits()
        limits.set("db", LimitRule(concurrency=1))
        # Another process takes the unit and dies holding it (os._exit: nothing is given back).
        code = ("import os, sys; from journal import HOST, open_store; from journal.limits import Request; "
                "s = open_store(sys.argv[1]); o = f'{HOST}:{os.getpid()}:held'; "
                "print(s.limits().acquire(Request('ghost', ('db',), o, HOST, os.getpid())), flush=True); "
                "os._exit(0)")
        done = subprocess.run([sys.executable, "-c", code, store.path], capture_output=True, text=True, check=True,
                              timeout=120)
        assert done.stdout.strip() == "Granted()", done.stderr
        # On this host its pid says it is gone; on a database, its ended session (ended by the
        # server once it sees the connection closed: asked again until then).
        deadline = time.time() + 30
        while not isinstance(limits.acquire(_req("mine", "db")), Granted):
            assert time.time() < deadline, "the dead holder's unit never came back"
            time.sleep(0.05)
        assert _view(store, "db").in_use == 1

    def test_a_shared_hold_goes_back_only_with_the_claim_that_holds_it(self, store: Any) -> None:
        # An invocation's run hold is one id in every process: a look takes it with claim 0, each
        # execution with its lease epoch. An execution ending late (epoch 1) must not give back
        # the unit the next execution (epoch 2) holds, nor a look's give-up (claim 0) either.
        limits = store.limits()
        limits.set("one", LimitRule(concurrency=1))
        assert limits.acquire(_req("run:x", "one", claim=0, owner="look")) == Granted()
        assert limits.acquire(_req("run:x", "one", claim=1, owner="first")) == Granted()  # its execution
        assert limits.acquire(_req("run:x", "one", claim=0, owner="second")) == Granted()  # another look: the same unit
        assert limits.acquire(_req("run:x", "one", claim=2, owner="second")) == Granted()  # the next execution
        assert limits.acquire(_req("run:x", "one", claim=1, owner="first")) == Granted()  # the first, late
        limits.release("run:x", ("one",), claim=1)  # ... and ending late
        limits.release("run:x", ("one",), claim=0)
        assert _view(store, "one").in_use == 1
        assert isinstance(limits.acquire(_req("other", "one")), Blocked)
        limits.release("run:x", ("one",), claim=2)
        assert _view(store, "one").in_use == 0
        assert limits.acquire(_req("other", "one")) == Granted()

    def test_an_execution_gives_back_what_a_look_or_a_dead_earlier_execution_took(self, store: Any) -> None:
        # Parked at epoch 4 (a damaged journal), after a look took the unit, or after the
        # execution at epoch 3 died holding it and another worker's look found it held.
        limits = store.limits()
        limits.set("one", LimitRule(concurrency=1))
        assert limits.acquire(_req("run:x", "one", claim=0)) == Granted()
        limits.release("run:x", ("one",), claim=4)
        assert _view(store, "one").in_use == 0
        assert limits.acquire(_req("run:y", "one", claim=3, owner="dead")) == Granted()
        assert limits.acquire(_req("run:y", "one", claim=0, owner="look")) == Granted()  # found held
        limits.release("run:y", ("one",), claim=4)
        assert _view(store, "one").in_use == 0

    def test_a_withdrawn_waiter_no_longer_stands_in_line(self, store: Any) -> None:
        limits = store.limits()
        limits.set("db", LimitRule(concurrency=1))
        assert limits.acquire(_req("a", "db")) == Granted()
        assert isinstance(limits.acquire(_req("b", "db")), Blocked)
        assert isinstance(limits.acquire(_req("c", "db")), Blocked)
        limits.withdraw("b", ("db",))
        limits.release("a", ("db",))
        assert limits.acquire(_req("c", "db")) == Granted()
        assert limits.waiting_for("nobody") == []

    def test_waiting_for_names_what_a_label_waits_on(self, store: Any) -> None:
        limits = store.limits()
        limits.set("db", LimitRule(concurrency=1))
        assert limits.acquire(_req("a", "db")) == Granted()
        assert isinstance(limits.acquire(_req("b", "db", label="inv-1")), Blocked)
        assert limits.waiting_for("inv-1") == ["db"]
