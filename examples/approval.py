"""A refund agent that waits for a human's approval before it moves money.

    journal run examples/approval.py:refund --id refund-1001 \\
        --input '{"order": "A-1001", "amount": 42.5, "reason": "arrived broken"}'
    # exit code 3: suspended, waiting on promise "approval"
    journal resolve refund-1001 approval '{"approved": true, "by": "dana"}'
    journal resume refund-1001      # or let a running `journal worker` pick it up

While it waits, the invocation is only its journal: no process, no memory, no lease.
The approval may come minutes or days later, from another process or machine sharing
the store; `journal resume` (or a running `journal worker`) replays the draft from the
journal instead of asking the model again, receives the decision and goes on.

The refund is issued with the step's idempotency key, as a payment API would take it:
if the process dies between the payment and its journal entry, the retried call carries
the same key and the provider returns the first refund instead of paying twice.
"""

from __future__ import annotations

import hashlib

import msgspec
from llm import chat_model, record_call, simulated_latency

from runtime import Context, TerminalError, current_step


class RefundRequest(msgspec.Struct):
    order: str
    amount: float
    reason: str
    customer: str = "customer@example.com"


class Decision(msgspec.Struct):
    approved: bool
    by: str = ""
    note: str = ""


class Receipt(msgspec.Struct):
    refund_id: str
    order: str
    amount: float


async def issue_refund(order: str, amount: float) -> Receipt:
    """Stands in for a payment provider's refund call, keyed for idempotency."""
    key = current_step().idempotency_key
    await simulated_latency()
    record_call(f"{order} {amount:.2f}")
    # A real provider returns the same refund for the same Idempotency-Key.
    return Receipt("rf_" + hashlib.sha256(key.encode()).hexdigest()[:12], order, amount)


async def send_email(to: str, body: str) -> str:
    """Stands in for an email API."""
    await simulated_latency()
    record_call(to)
    return f"sent to {to}"


async def refund(ctx: Context, request: RefundRequest) -> dict:
    if request.amount <= 0:
        raise TerminalError(f"refund amount must be positive, got {request.amount}")
    model = chat_model()
    draft = await ctx.run("draft", model.complete, [
        {"role": "system", "content": "Write a two-sentence, friendly email confirming a refund."},
        {"role": "user", "content": f"Refund of {request.amount:.2f} for order {request.order}: {request.reason}"},
    ])
    await ctx.emit({"waiting_for": "approval", "draft": draft.content})

    # Suspends here until someone runs `journal resolve ID approval '{"approved": true}'`
    # (a bare `true` or `false` is accepted too).
    decision = await ctx.promise("approval", type=Decision | bool)
    if isinstance(decision, bool):
        decision = Decision(approved=decision)
    if not decision.approved:
        return {"order": request.order, "status": "declined", "by": decision.by, "note": decision.note}

    receipt = await ctx.run("refund", issue_refund, request.order, request.amount)
    await ctx.run("email", send_email, request.customer, draft.content)
    return {"order": request.order, "status": "refunded", "by": decision.by, "refund_id": receipt.refund_id}
