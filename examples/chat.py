"""A chat agent with thread memory: each turn is an invocation, the conversation is the key's state.

    journal run examples/chat.py:chat --key thread-42 --input '"Hello, I am Ada."'
    journal run examples/chat.py:chat --key thread-42 --input '"I am writing a compiler."'
    journal run examples/chat.py:chat --key thread-42 --input '"What do you know about me?"'
    journal state thread-42         # the conversation so far

Every invocation run with the same `--key` belongs to one thread. They run one at a
time, in arrival order, and share `ctx.state`: here, the `history` of the conversation.
A turn reads the history (the read is journaled, so a replay sees the same history),
asks the model with it (a step: a crash does not pay for the answer twice), and appends
the exchange to the history. The append is journaled and written in the same transaction
as the turn's last entry, so a turn killed half-way adds nothing, and `journal resume`
finishes it exactly once.

Without OPENAI_BASE_URL / OPENAI_API_KEY the model is offline: the scripted model from
llm.py, which answers from the whole conversation it is sent, so its reply shows what the
agent remembered. EXAMPLE_LATENCY and EXAMPLE_CALL_LOG work as in the other examples.
"""

from __future__ import annotations

from typing import Any

import msgspec
from llm import Reply, ScriptedModel, chat_model

from runtime import Context, RetryPolicy

SYSTEM = "You are a helpful assistant in a long conversation. Use what the user told you earlier."

# How many messages of history are sent with each turn (and kept): prompts stay bounded.
MAX_MESSAGES = 40

MODEL_RETRY = RetryPolicy(max_attempts=5, initial_interval=1.0, max_interval=30.0)


class ScriptedChat(ScriptedModel):
    """The offline model, answering from the conversation: what the user just said and said before."""

    async def complete(self, messages: list[dict[str, Any]], **params: Any) -> Reply:
        reply = await super().complete(messages, **params)  # its latency and its line in the call log
        *earlier, last = [f'"{m["content"]}"' for m in messages if m["role"] == "user"]
        if not earlier:
            content = f"You said {last} That is the first thing you told me."
        else:
            before = earlier[0] if len(earlier) == 1 else ", ".join(earlier[:-1]) + " and " + earlier[-1]
            content = f"You said {last} Before that you said {before}."
        return msgspec.structs.replace(reply, content=content)


def model() -> Any:
    """The configured endpoint if there is one (see llm.py), else the offline chat model."""
    chosen = chat_model()
    return ScriptedChat() if isinstance(chosen, ScriptedModel) else chosen


def remember(history: list[dict[str, str]], exchange: list[dict[str, str]]) -> list[dict[str, str]]:
    """The state reducer: append the turn's messages, keep the most recent ones."""
    return [*history, *exchange][-MAX_MESSAGES:]


async def chat(ctx: Context, message: str) -> str:
    history: list[dict[str, str]] = await ctx.state.get("history", default=[])
    asked = {"role": "user", "content": message}
    messages = [{"role": "system", "content": SYSTEM}, *history, asked]
    reply: Reply = await ctx.run("reply", model().complete, messages, retry=MODEL_RETRY)
    ctx.state.update("history", [asked, {"role": "assistant", "content": reply.content}],
                     reducer=remember, default=[])
    return reply.content
