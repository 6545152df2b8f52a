"""How a run ends, told to its user: each step as it finishes (`Progress`), the outcome as
text or JSON with its exit status (`report`), and the command lines that continue an
invocation left suspended (on a promise, a timer or a child), queued or interrupted.
`run`, `resume`, `resolve` and `cancel` (`_run.py`), `worker` and `serve` print through
these."""

from __future__ import annotations

import time
from typing import Any

import click

from journal import MESSAGE_WAIT, InvocationRecord, Status, iso_from_us, promise_type
from journal.views import error_json
from runtime import Outcome
from runtime.hooks import Attempt, AttemptObserver, Observer, StepEvent

from . import _render as render
from ._common import DIVERGED, FAILED, OK, SUSPENDED, Exit, echo_err, out, suggest

_MARKS = {"live": "✓", "replayed": "↺", "failed": "✗"}


class Progress(Observer):
    """Prints each step as it finishes (stderr), for `run`, `resume`, `worker` and `serve`,
    and each invocation a worker parks because its handler does not load here."""

    def __init__(self, enabled: bool, *, prefix_ids: bool = False) -> None:
        self.enabled = enabled
        self.prefix_ids = prefix_ids
        self.live = 0
        self.replayed = 0

    def step(self, event: StepEvent) -> None:
        replayed = event.how == "replayed"
        if replayed:
            self.replayed += 1
        else:
            self.live += 1
        if not self.enabled:
            return
        mark = _MARKS.get(event.how, "·")
        colour = {"live": "green", "failed": "red"}.get(event.how)
        when = "replayed" if replayed else render.duration(event.seconds)
        prefix = f"[{render.cut(event.invocation_id, 20)}] " if self.prefix_ids else "  "
        line = f"{render.safe(prefix)}{render.styled(mark, fg=colour)} {render.cut(event.name, 40):<24} {when:>9}"
        if event.how == "failed":
            line += render.styled("  failed", fg="red")
        echo_err(render.Styled(line))

    def parked(self, invocation_id: str, reason: str) -> None:
        echo_err(f"[{render.cut(invocation_id, 20)}] parked as diverged: {reason}")

    def skipped(self, invocation_id: str, reason: str) -> None:
        echo_err(f"[{render.cut(invocation_id, 20)}] skipped: {reason}")

    def paused(self, reason: str) -> None:
        echo_err(f"paused: {reason}")

    def went_on(self) -> None:
        echo_err("the store can be written again; going on")

    def attempt(self, attempt: Attempt) -> AttemptObserver | None:
        # A worker's or server's log (ids prefixed) tells how each invocation it ran ended
        # badly; `run` and `resume` report their one outcome themselves (`report`).
        return _Ending(attempt.invocation_id) if self.prefix_ids else None

    def summary(self) -> str:
        return f"{self.live} step{'s' if self.live != 1 else ''} live, {self.replayed} replayed"


class _Ending(AttemptObserver):
    """Logs an attempt that left its invocation failed or diverged, even with `-q`, which quiets
    only the steps: a worker's or server's log shows what went wrong."""

    __slots__ = ("invocation_id",)

    def __init__(self, invocation_id: str) -> None:
        self.invocation_id = invocation_id

    def ended(self, status: Status, record: InvocationRecord | None, replayed: int) -> None:
        if status == Status.FAILED:
            error = record.error if record is not None else None
            text = f"failed: {error.type}: {error.message}" if error else "failed"
        elif status == Status.DIVERGED:
            first = (record.divergence or "").strip().splitlines() if record is not None else []
            text = "diverged" + (f": {first[0]}" if first else "") + f"; `journal replay {self.invocation_id}` shows it"
        else:
            return
        echo_err(f"[{render.cut(self.invocation_id, 20)}] {text}")


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    error = error_json(outcome.error)
    if outcome.status == Status.DIVERGED and outcome.divergence:
        error = {"type": "NondeterminismError", "message": outcome.divergence, "terminal": False}
    return {
        "id": outcome.id,
        "status": outcome.status.value,
        "result": outcome.result,
        "error": error,
        "waiting": outcome.waiting,
        "wake_at": outcome.wake_at,
    }


def suspension_help(outcome: Outcome, db: str | None, waits_on: InvocationRecord | None = None) -> str:
    resume = suggest(["resume", outcome.id], db)
    if waits_on is not None and waits_on.id != outcome.id:
        return _child_wait_help(outcome, waits_on, db)
    if outcome.waiting is not None and outcome.waiting.startswith(MESSAGE_WAIT):
        topic = outcome.waiting[len(MESSAGE_WAIT):]
        wanted = promise_type(waits_on, outcome.waiting) if waits_on is not None else None
        fits = render.fitting(wanted) if wanted is not None else "JSON"
        return "\n".join([
            render.safe(f"invocation {outcome.id} is suspended, waiting for a message on topic {topic!r}."),
            render.safe(f"Send it a {wanted.type} (for example {fits}):") if wanted is not None
            else "Send it one (any JSON value):",
            f"  {suggest(['send', outcome.id, topic, fits], db)}",
            "then continue it (or keep `journal worker` running):",
            f"  {resume}",
        ])
    if outcome.waiting is not None:
        wanted = promise_type(waits_on, outcome.waiting) if waits_on is not None else None
        fits = render.fitting(wanted)
        return "\n".join([
            f"invocation {outcome.id} is suspended, waiting for promise {outcome.waiting!r}.",
            render.safe(f"Deliver a value of type {wanted.type} (for example {fits}) or reject it:") if wanted is not None
            else "Deliver it (any JSON value) or reject it:",
            *_resolve_commands(outcome.id, outcome.waiting, db, fits),
            "then continue it:",
            f"  {resume}",
        ])
    wake = outcome.wake_at
    left = f" (in {render.duration(wake.timestamp() - time.time())})" if wake is not None else ""
    return "\n".join([
        f"invocation {outcome.id} is suspended on a durable timer until "
        f"{wake.isoformat().replace('+00:00', 'Z') if wake else 'later'}{left}.",
        "Continue it after that time (or keep `journal worker` running):",
        f"  {resume}",
    ])


def _resolve_commands(invocation_id: str, promise: str, db: str | None, value: str = "true") -> list[str]:
    """The two ways to settle `invocation_id`'s promise, as commands to copy."""
    return [f"  {suggest(['resolve', invocation_id, promise, value], db)}",
            f"  {suggest(['resolve', invocation_id, promise, '--reject', 'reason'], db)}"]


def _child_wait_help(outcome: Outcome, waits_on: InvocationRecord, db: str | None) -> str:
    """A parent suspended in ctx.call: what its child (or a descendant) waits for, and how it gets run.
    The parent's own `child:` promise is settled by the child's result, never by hand."""
    resume = suggest(["resume", outcome.id], db)
    child = waits_on.id
    head = f"invocation {outcome.id} is suspended in ctx.call, waiting for child invocation {child}"
    if waits_on.waiting is not None:
        return "\n".join([
            f"{head}, which waits for promise {waits_on.waiting!r}.",
            "Deliver it to the child (any JSON value) or reject it:",
            *_resolve_commands(child, waits_on.waiting, db),
            "then continue the parent, which runs the child first and goes on with its result:",
            f"  {resume}",
        ])
    if waits_on.wake_at is not None:
        wake = iso_from_us(waits_on.wake_at)
        return "\n".join([
            f"{head}, which is suspended on a durable timer until {wake}.",
            "Continue the parent after that time (it runs the child first), or keep `journal worker` running:",
            f"  {resume}",
        ])
    return "\n".join([
        f"{head}, which is {waits_on.status.value}.",
        "Continue the parent, which runs the child first:",
        f"  {resume}",
    ])


def report(outcome: Outcome, *, db: str | None, as_json: bool, cancel_ok: bool = False,
           waits_on: InvocationRecord | None = None) -> int:
    """Print where the invocation stands (result to stdout, the rest to stderr); return the exit code."""
    if as_json:
        click.echo(render.to_json(outcome_json(outcome)))
    status = outcome.status
    if status == Status.COMPLETED:
        if not as_json:
            out(render.value_text(outcome.result))
        return OK
    if status == Status.FAILED:
        error = outcome.error
        echo_err(f"invocation {outcome.id} failed: {error.type}: {error.message}" if error else
                 f"invocation {outcome.id} failed")
        return FAILED
    if status == Status.CANCELLED:
        if cancel_ok:  # what `journal cancel` asked for: its result
            if not as_json:
                out(f"cancelled {outcome.id}")
            return OK
        echo_err(f"invocation {outcome.id} was cancelled")
        return FAILED
    if status == Status.SUSPENDED:
        echo_err(suspension_help(outcome, db, waits_on))
        return SUSPENDED
    if status == Status.DIVERGED:
        echo_err(outcome.divergence or f"invocation {outcome.id} diverged from its journal")
        return DIVERGED
    echo_err(f"invocation {outcome.id} is {status.value}: another process is running it; "
             f"`{suggest(['tail', outcome.id, '-f'], db)}` follows it")
    return FAILED


def queued_exit(outcome: Outcome, note: str, as_json: bool) -> None:
    """Leave with exit 3: the invocation waits in its key's queue behind one that nobody runs."""
    if as_json:
        click.echo(render.to_json(outcome_json(outcome)))
    echo_err(note)
    raise Exit(SUSPENDED)


def disk_full_help(exc: Exception, invocation_id: str, db: str | None) -> str:
    """What `run` and `resume` say when the store's disk filled up under them."""
    where = str(exc).split(";")[0]  # "the disk holding PATH is full"
    return "\n".join([
        f"{where}: invocation {invocation_id} stopped before its next entry was journaled. Every step "
        "committed before this is intact, and it can be resumed (the handler did not fail).",
        "Free some space (`journal trim` then `journal compact` drop the journals of finished invocations), "
        "then continue it:",
        f"  {suggest(['resume', invocation_id], db)}",
    ])


def interrupted_help(invocation_id: str, db: str | None) -> str:
    return f"interrupted; invocation {invocation_id} is pending and resumes with:\n  {suggest(['resume', invocation_id], db)}"
