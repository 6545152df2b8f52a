"""A chat agent with thread memory, in two shapes.

`chat`: each turn is an invocation, the conversation is the key's state.

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

`thread`: one long-running invocation per conversation, talked to while it runs
(docs/messages.md walks through it):

    journal start examples/chat.py:thread --id thread-7 --key thread-7
    journal worker &                                  # runs it; it waits for messages
    journal send thread-7 user '"Hello, I am Ada."'   # a turn: its answer is streamed
    journal request thread-7 status '{}'              # answered by the running thread
    journal get thread-7 progress                     # read from the store, no worker needed
    journal send thread-7 user '"/bye"'               # ends the conversation

It receives the user's messages on topic `user`, in order, each once; streams each answer
as chunks (`journal tail -f thread-7`); publishes its progress under `progress`; and
answers requests on topic `status` with how far it is. A message is journaled when it is
received, so a crash at any point neither loses one nor answers one twice.
"""

from __future__ import annotations

from typing import Any

import msgspec
from llm import Reply, ScriptedModel, chat_model

from runtime import Context, Message, RetryPolicy, current_step

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


async def streamed(messages: list[dict[str, Any]]) -> str:
    """One model call whose answer is streamed word by word to whoever follows the thread."""
    reply: Reply = await model().complete(messages)
    step = current_step()
    for word in reply.content.split(" "):
        step.emit(word + " ")
    return reply.content


async def thread(ctx: Context, greeting: str | None = None) -> dict[str, Any]:
    """A conversation as one invocation: it takes the user's messages and status requests
    until the user says /bye (or nothing comes for a day), and ends with its transcript."""
    history: list[dict[str, str]] = []
    turns = 0
    await ctx.publish("progress", {"turns": 0, "state": "waiting"})
    while True:
        index, message = await ctx.select(ctx.receive("user", type=str, timeout=86_400), ctx.receive("status"))
        assert isinstance(message, Message)
        if index == 1:  # a status request: answered by the running thread, journaled
            await message.reply({"turns": turns, "last": history[-1]["content"] if history else None})
            continue
        if message.value.strip() == "/bye":
            await ctx.publish("progress", {"turns": turns, "state": "ended"})
            return {"turns": turns, "history": history}
        await ctx.publish("progress", {"turns": turns, "state": "answering"})
        asked = {"role": "user", "content": message.value}
        answer = await ctx.run("answer", streamed, [{"role": "system", "content": SYSTEM}, *history, asked],
                               retry=MODEL_RETRY)
        history = [*history, asked, {"role": "assistant", "content": answer}][-MAX_MESSAGES:]
        turns += 1
        if message.wants_reply:
            await message.reply(answer)
        await ctx.publish("progress", {"turns": turns, "state": "waiting"})
