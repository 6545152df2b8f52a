"""A ReAct research agent: think, call tools in parallel, observe, repeat, answer.

    journal run examples/research.py:research --input '{"question": "Why does LMDB need fsync?"}'

Every model call and every tool call is a step (`ctx.run`), so each is journaled the
moment it finishes. Kill the process at any point and run `journal resume ID`: the
finished calls are replayed from the journal, not made again, and the agent carries on
from where it was. Without OPENAI_BASE_URL / OPENAI_API_KEY the model is the offline
`ScriptedModel` from llm.py; with them, any OpenAI-compatible endpoint.

Set EXAMPLE_LATENCY=1 to make the offline model and tools slow enough to kill by hand,
and EXAMPLE_CALL_LOG=calls.log to see, one line per call, that nothing ran twice.
"""

from __future__ import annotations

import asyncio
import json
import re

import msgspec
from llm import Reply, chat_model, record_call, simulated_latency

from runtime import Context, RetryPolicy

SYSTEM = """You are a research agent working in the ReAct style.
Answer the user's question using the tools, then answer it in a few sentences.
Reply with exactly one JSON object and nothing else, either
  {"thought": "...", "actions": [{"tool": "search", "input": "..."}]}
to call tools (all actions of one reply run in parallel), or
  {"thought": "...", "answer": "..."}
when you can answer. Cite sources as [id].
Tools:
  search(query): short passages from the library, each with a source id."""

# Model calls are slow and paid: retry transient failures patiently.
MODEL_RETRY = RetryPolicy(max_attempts=5, initial_interval=1.0, max_interval=30.0)


class Question(msgspec.Struct):
    question: str
    max_rounds: int = 3


class Passage(msgspec.Struct):
    source: str
    text: str


class Report(msgspec.Struct):
    question: str
    answer: str
    sources: list[str]
    rounds: int


class Action(msgspec.Struct):
    tool: str
    input: str


class Decision(msgspec.Struct):
    thought: str = ""
    actions: list[Action] = []
    answer: str | None = None


LIBRARY = [
    Passage("lmdb", "LMDB is an embedded key-value store built on a memory-mapped B+tree; "
                    "it allows one writer at a time and readers never block."),
    Passage("fsync", "fsync asks the operating system to put written data on stable storage; "
                     "until it returns, a power loss can still lose the write."),
    Passage("wal", "A write-ahead log records each change before it takes effect, "
                   "so after a crash the log says what already happened."),
    Passage("replay", "Deterministic replay rebuilds a program's state by feeding it recorded results "
                      "instead of computing them again."),
    Passage("idempotency", "An idempotency key lets a server recognise a retried request "
                           "and return the first response instead of acting twice."),
    Passage("react", "ReAct interleaves reasoning and acting: the model writes a thought, "
                     "calls tools, reads their observations, and repeats until it can answer."),
    Passage("lease", "A lease is ownership that expires unless renewed; an epoch number "
                     "stops a stale owner from writing after it lost the lease."),
]


async def search(query: str) -> list[Passage]:
    """The agent's tool: a keyword search over a small offline library."""
    await simulated_latency()
    record_call(query)
    words = set(re.findall(r"[a-z0-9-]+", query.lower()))
    hits = [p for p in LIBRARY if words & set(re.findall(r"[a-z0-9-]+", f"{p.source} {p.text}".lower()))]
    return hits[:2]


TOOLS = {"search": search}


def parse_decision(content: str) -> Decision | None:
    """The JSON object in a model's reply (models like to wrap it in prose or code fences)."""
    match = re.search(r"\{.*\}", content, re.DOTALL)
    if match is None:
        return None
    try:
        return msgspec.json.decode(match.group(0), type=Decision)
    except msgspec.MsgspecError:
        return None


def observation(actions: list[Action], results: list[list[Passage] | str]) -> str:
    lines = ["Observation:"]
    for action, result in zip(actions, results, strict=False):
        lines.append(f"{action.tool}({action.input!r}):")
        if isinstance(result, str):
            lines.append(f"  error: {result}")
        elif not result:
            lines.append("  no results")
        lines += [f"  [{p.source}] {p.text}" for p in result if not isinstance(result, str)]
    return "\n".join(lines)


async def call_tool(ctx: Context, action: Action) -> list[Passage] | str:
    tool = TOOLS.get(action.tool)
    if tool is None:
        return f"there is no tool {action.tool!r}; the tools are {', '.join(TOOLS)}"
    return await ctx.run(action.tool, tool, action.input)


async def research(ctx: Context, input: Question) -> Report:
    model = chat_model()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Question: {input.question}"}]
    sources: list[str] = []
    for round in range(1, input.max_rounds + 1):
        reply: Reply = await ctx.run("think", model.complete, messages, retry=MODEL_RETRY)
        messages.append({"role": "assistant", "content": reply.content})
        decision = parse_decision(reply.content)
        if decision is None:
            messages.append({"role": "user", "content": "That was not one JSON object. Reply again, JSON only."})
            continue
        await ctx.emit({"round": round, "thought": decision.thought})
        if decision.answer is not None:
            return Report(input.question, decision.answer, sources, round)
        # Each tool call is its own step; they run concurrently and are replayed by seq.
        results = await asyncio.gather(*(call_tool(ctx, a) for a in decision.actions))
        for result in results:
            sources += [p.source for p in result if not isinstance(result, str) and p.source not in sources]
        messages.append({"role": "user", "content": observation(decision.actions, results)})
    messages.append({"role": "user", "content": 'Out of rounds: reply {"answer": "..."} with what you know.'})
    reply = await ctx.run("answer", model.complete, messages, retry=MODEL_RETRY)
    decision = parse_decision(reply.content)
    answer = decision.answer if decision is not None and decision.answer else reply.content
    return Report(input.question, answer, sources, input.max_rounds)


if __name__ == "__main__":
    # `python examples/research.py "question"` runs it without the CLI, on ./.journal.
    import sys

    import anyio

    from runtime import Engine

    async def main() -> None:
        async with Engine.open() as engine:
            outcome = await engine.run(research, Question(" ".join(sys.argv[1:]) or "Why does LMDB need fsync?"))
            print(json.dumps(msgspec.to_builtins(outcome), indent=2))

    anyio.run(main)
