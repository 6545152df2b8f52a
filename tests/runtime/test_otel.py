"""OpenTelemetry traces: spans per attempt and per live step, replays counted, errors marked,
and one trace for the whole logical run, across kill -9 and into child invocations."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.util._once import Once

import runtime.otel  # noqa: F401 - registers OpenTelemetry as a default observer
from journal import LmdbStore, Status, decode_entry
from runtime import Engine

from ..waiting import wait_while_alive
from . import otel_handlers as h

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _install(provider):
    # The API sets its global provider once per process; tests put it back for the next test.
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    if provider is not None:
        trace.set_tracer_provider(provider)


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _install(provider)
    h.FLAKY.clear()
    h.RENAMED["on"] = False
    yield exporter
    _install(None)
    provider.shutdown()


def named(exporter, prefix):
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def started_trace(db, invocation_id):
    with LmdbStore(str(db), readonly=True) as store:
        return decode_entry(store.entries(invocation_id)[0][1]).trace


@pytest.mark.anyio
async def test_an_attempt_span_and_a_span_per_live_step_attempt_with_their_attributes(open_engine, spans, mode):
    async with open_engine() as engine:
        outcome = await engine.run(h.agent, "why", id="a1")
    assert outcome.status == Status.COMPLETED
    attempts = named(spans, "journal.attempt")
    assert attempts and all(s.attributes["journal.invocation.id"] == "a1" for s in attempts)
    assert attempts[-1].attributes["journal.status"] == "completed"
    steps = named(spans, "journal.step")
    assert [(s.attributes["journal.step.name"], s.attributes["journal.step.attempt"]) for s in steps] == [
        ("plan", 1), ("answer", 1), ("answer", 2)]
    first, failed, retried = steps
    assert first.attributes["journal.step.seq"] == 1 and retried.attributes["journal.step.seq"] == 2
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.events[0].attributes["exception.type"] == "ConnectionError"
    assert retried.status.status_code == StatusCode.UNSET
    # The idempotency key the step function saw is the one on its span.
    assert outcome.result.endswith(f"(key {retried.attributes['journal.step.idempotency_key']})")
    assert failed.attributes["journal.step.idempotency_key"] == retried.attributes["journal.step.idempotency_key"]
    # One trace: the start span, the attempts, the steps under the attempt that ran them.
    start = named(spans, "journal.start")
    assert len(start) == 1 and {s.context.trace_id for s in spans.get_finished_spans()} == {start[0].context.trace_id}
    assert all(s.parent.span_id == start[0].context.span_id for s in attempts)
    attempt_ids = {s.context.span_id for s in attempts}
    assert all(s.parent.span_id in attempt_ids for s in steps)


@pytest.mark.anyio
async def test_a_resumed_attempt_counts_the_entries_it_replayed_and_runs_no_step_span_for_them(open_engine, spans):
    async with open_engine() as engine:
        assert (await engine.run(h.approval, "q", id="r1")).status == Status.SUSPENDED
        await engine.resolve("r1", "approval", True)
        spans.clear()
        assert (await engine.resume("r1")).status == Status.COMPLETED
        journaled = started_trace_id(engine, "r1")
    attempts = named(spans, "journal.attempt")
    assert attempts[-1].attributes["journal.replayed_entries"] >= 1
    assert attempts[-1].attributes["journal.status"] == "completed"
    assert named(spans, "journal.step") == []  # the draft was replayed, not run
    assert {s.context.trace_id for s in attempts} == {int(journaled, 16)}


@pytest.mark.anyio
async def test_an_attempt_span_carries_the_invocations_tags(open_engine, spans):
    async def tagged(ctx, x: int) -> int:
        await ctx.tag("stage", "late")
        return x

    async with open_engine() as engine:
        assert (await engine.run(tagged, 1, id="tg", tags={"customer": "acme"})).status == Status.COMPLETED
    attempt = named(spans, "journal.attempt")[-1]
    assert attempt.attributes["journal.tag.customer"] == "acme"
    assert attempt.attributes["journal.tag.stage"] == "late"


def started_trace_id(engine, invocation_id):
    return decode_entry(engine.store.entries(invocation_id)[0][1]).trace.split("-")[1]


@pytest.mark.anyio
async def test_failures_and_divergence_are_span_errors(open_engine, spans):
    async with open_engine() as engine:
        assert (await engine.run(h.refuses, "q", id="f1")).status == Status.FAILED
        failed = [s for s in named(spans, "journal.attempt") if s.attributes["journal.invocation.id"] == "f1"][-1]
        assert failed.status.status_code == StatusCode.ERROR
        assert "the reviewer refused" in failed.status.description
        assert failed.events[-1].attributes["exception.type"] == "TerminalError"

        assert (await engine.run(h.approval, "q", id="d1")).status == Status.SUSPENDED
        h.RENAMED["on"] = True  # the code changed under the suspended invocation
        await engine.resolve("d1", "approval", True)
        assert (await engine.resume("d1")).status == Status.DIVERGED
    diverged = [s for s in named(spans, "journal.attempt") if s.attributes["journal.invocation.id"] == "d1"][-1]
    assert diverged.status.status_code == StatusCode.ERROR
    assert diverged.status.description.startswith("NondeterminismError")
    assert diverged.attributes["journal.status"] == "diverged"


@pytest.mark.anyio
async def test_a_child_invocation_joins_its_parents_trace(open_engine, spans):
    async with open_engine() as engine:
        assert (await engine.run(h.parent, 4, id="p1")).result == 8
    by_id = {}
    for s in named(spans, "journal.attempt"):
        by_id.setdefault(s.attributes["journal.invocation.id"], []).append(s)
    assert set(by_id) == {"p1", "p1-child"}
    assert {s.context.trace_id for s in by_id["p1-child"]} == {by_id["p1"][0].context.trace_id}
    parent_ids = {s.context.span_id for s in by_id["p1"]}
    assert all(s.parent.span_id in parent_ids for s in by_id["p1-child"])


@pytest.mark.anyio
async def test_the_callers_current_span_is_the_trace_an_invocation_joins(open_engine, spans):
    tracer = trace.get_tracer("app")
    async with open_engine() as engine:
        with tracer.start_as_current_span("POST /refunds") as request:
            await engine.start(h.agent, "q", id="c1")
        await engine.resume("c1")
    attempt = named(spans, "journal.attempt")[0]
    assert attempt.context.trace_id == request.get_span_context().trace_id
    assert attempt.parent.span_id == request.get_span_context().span_id
    assert named(spans, "journal.start") == []


@pytest.mark.anyio
async def test_without_a_configured_provider_nothing_is_traced_or_journaled(open_engine):
    _install(None)
    async with open_engine() as engine:
        assert (await engine.run(h.agent, "q", id="n1")).status == Status.COMPLETED
        assert decode_entry(engine.store.entries("n1")[0][1]).trace is None


CRASHING = textwrap.dedent("""
    import json, sys, anyio
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, ConsoleSpanExporter
    import runtime.otel
    from runtime import Engine
    from tests.runtime.otel_handlers import crashes
    db, spans_file, files = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    out = open(spans_file, "w")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
        out=out, formatter=lambda span: span.to_json(indent=None) + "\\n")))
    trace.set_tracer_provider(provider)
    async def main():
        async with Engine.open(db) as engine:
            await engine.run(crashes, files, id="crashy")
    anyio.run(main)
""")


def test_a_resume_after_kill_9_joins_the_original_trace(tmp_path, spans):
    db, spans_file = tmp_path / "db", tmp_path / "spans.jsonl"
    files = {"entered": str(tmp_path / "entered"), "go": str(tmp_path / "go")}
    proc = subprocess.Popen([sys.executable, "-c", CRASHING, str(db), str(spans_file), json.dumps(files)],
                            env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    wait_while_alive(proc, lambda: os.path.exists(files["entered"]), "the handler reached step two")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = [json.loads(line) for line in spans_file.read_text().splitlines()]
    # Ended before the kill: the start span and step one. The attempt and step two never ended.
    assert sorted(s["name"] for s in before) == ["journal.start", "journal.step one"]
    original = before[0]["context"]["trace_id"]
    assert {s["context"]["trace_id"] for s in before} == {original}
    assert started_trace(db, "crashy").split("-")[1] == original.removeprefix("0x")

    open(files["go"], "w").close()

    async def resume():
        async with Engine.open(db) as engine:
            return await engine.resume("crashy")

    import anyio

    assert anyio.run(resume).result == "went on"
    attempt = named(spans, "journal.attempt")[0]
    assert f"0x{attempt.context.trace_id:032x}" == original
    start_span = next(s for s in before if s["name"] == "journal.start")
    assert f"0x{attempt.parent.span_id:016x}" == start_span["context"]["span_id"]
    assert attempt.attributes["journal.replayed_entries"] == 1  # step one came from the journal
    assert [s.attributes["journal.step.name"] for s in named(spans, "journal.step")] == ["two"]
