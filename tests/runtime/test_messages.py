"""Talking to a running invocation from its handler: `ctx.receive`, `message.reply`,
`ctx.publish`; and from outside: `Engine.send_message`, `request`, `reply`, `get_value`.
Over asyncio, trio, always-replay (LMDB) and PostgreSQL."""

import anyio
import msgspec
import pytest

from journal import Status, decode_entry, kind_of
from journal.errors import MessageRefused, MessageValueRefused, ValueNotPublished
from runtime import Context, Message, StepTimeout
from runtime.errors import PromiseNotSettable

pytestmark = pytest.mark.anyio


class Order(msgspec.Struct):
    item: str
    qty: int


def kinds(store, invocation_id):
    return [kind_of(decode_entry(d)) for _, d in store.entries(invocation_id)]


async def collect(ctx: Context, n: int) -> list:
    got = []
    for _ in range(n):
        message = await ctx.receive("chat")
        got.append([message.id, message.value])
    return got


async def test_messages_sent_before_the_handler_asks_wait_and_arrive_in_order_once(open_engine):
    async with open_engine() as engine:
        await engine.start(collect, 3, id="c")
        for i in range(3):
            await engine.send_message("c", "chat", f"m{i}", message_id=f"id-{i}")
        await engine.send_message("c", "chat", "m0 again", message_id="id-0")  # a retried send
        outcome = await engine.resume("c")
        assert outcome.status == Status.COMPLETED
        assert outcome.result == [["id-0", "m0"], ["id-1", "m1"], ["id-2", "m2"]]
        assert kinds(engine.store, "c").count("received") == 3
        assert engine.store.next_message("c", "chat") is None  # each one taken, by the entry that journaled it


async def test_a_handler_suspended_in_receive_holds_nothing_and_a_message_wakes_it(open_engine):
    async with open_engine() as engine:
        outcome = await engine.run(collect, 2, id="w")
        assert outcome.status == Status.SUSPENDED and outcome.waiting == "message:chat"
        assert engine.store.lease("w").owner == ""  # no lease held while it waits
        from journal.views import waiting_on

        assert waiting_on(engine.store.require("w")) == [{"kind": "message", "topic": "chat"}]
        record_after = (await engine.send_message("w", "chat", "one"))
        assert record_after
        assert engine.store.require("w").status == Status.PENDING
        outcome = await engine.resume("w")
        assert outcome.status == Status.SUSPENDED  # its second receive waits
        await engine.send_message("w", "chat", "two")
        outcome = await engine.resume("w")
        assert [value for _, value in outcome.result] == ["one", "two"]


async def test_replay_returns_the_same_messages_and_takes_none_again(open_engine, calls):
    async def agent(ctx: Context) -> list:
        first = await ctx.receive("chat")
        await ctx.run("think", calls("think"), first.value)
        await ctx.promise("go")
        second = await ctx.receive("chat")
        return [first.value, second.value]

    async with open_engine() as engine:
        await engine.start(agent, id="r")
        await engine.send_message("r", "chat", "a")
        await engine.send_message("r", "chat", "b")
        assert (await engine.resume("r")).status == Status.SUSPENDED
        await engine.resolve("r", "go", True)
        assert (await engine.resume("r")).result == ["a", "b"]
    assert calls.counts == {"think": 1}


async def test_a_typed_receive_decodes_and_its_topic_refuses_a_value_that_does_not_fit(open_engine):
    async def agent(ctx: Context) -> list:
        out = []
        for _ in range(2):
            message: Message[Order] = await ctx.receive("orders", type=Order)
            assert isinstance(message.value, Order)
            out.append(message.value.qty)
        return out

    async with open_engine() as engine:
        assert (await engine.run(agent, id="t")).status == Status.SUSPENDED
        with pytest.raises(MessageValueRefused, match="as tests.runtime.test_messages.Order"):
            await engine.send_message("t", "orders", {"item": "tea", "qty": "two"})
        assert engine.store.require("t").status == Status.SUSPENDED  # the run goes on waiting
        await engine.send_message("t", "orders", {"item": "tea", "qty": 2})
        assert (await engine.resume("t")).status == Status.SUSPENDED
        with pytest.raises(MessageValueRefused):  # still declared while it is not waiting on it
            await engine.send_message("t", "orders", ["not", "an", "order"])
        await engine.send_message("t", "orders", {"item": "cake", "qty": 1})
        assert (await engine.resume("t")).result == [2, 1]


async def test_a_finished_invocation_refuses_messages(open_engine):
    async with open_engine() as engine:
        await engine.start(collect, 1, id="f")
        await engine.send_message("f", "chat", "only")
        assert (await engine.resume("f")).status == Status.COMPLETED
        with pytest.raises(MessageRefused, match="already completed"):
            await engine.send_message("f", "chat", "late")


async def test_a_receive_wait_is_not_a_promise_to_resolve(open_engine):
    async with open_engine() as engine:
        await engine.run(collect, 1, id="p")
        with pytest.raises(PromiseNotSettable, match="journal send p chat"):
            await engine.resolve("p", "message:chat", "x", early=True)


async def test_receive_timeout_raises_step_timeout_at_its_durable_deadline(open_engine):
    async def agent(ctx: Context) -> str:
        try:
            message = await ctx.receive("chat", timeout=2)
        except StepTimeout:
            return "gave up"
        return message.value

    async with open_engine(inline_sleep_limit=0.01) as engine:
        outcome = await engine.run(agent, id="to")
        assert outcome.status == Status.SUSPENDED and outcome.wake_at is not None  # the deadline is a timer
    # A restart: the engine that waited is gone; the deadline is in the journal, not in it.
    async with open_engine(inline_sleep_limit=0.01) as engine:
        engine.register(agent)
        with anyio.fail_after(10):
            while True:  # the deadline passes while nothing runs it
                await anyio.sleep(0.02)
                if engine.runnable():
                    break
        assert (await engine.resume("to")).result == "gave up"
        # The deadline was journaled: a message sent now is not what the recorded run received.
        assert kinds(engine.store, "to") == ["started", "sleep", "received", "completed"]


async def test_select_over_receive_and_a_promise(open_engine):
    async def agent(ctx: Context) -> list:
        index, value = await ctx.select(ctx.receive("chat"), ctx.promise("stop"))
        return [index, value.value if isinstance(value, Message) else value]

    async with open_engine() as engine:
        outcome = await engine.run(agent, id="s")
        assert outcome.status == Status.SUSPENDED
        record = engine.store.require("s")
        assert {record.waiting, *record.waiting_any} == {"message:chat", "stop"}
        await engine.send_message("s", "chat", "hello")
        assert (await engine.resume("s")).result == [0, "hello"]


async def test_a_request_is_answered_by_reply_once_committed(open_engine):
    async def agent(ctx: Context) -> str:
        while True:
            message = await ctx.receive("ask")
            if message.value == "stop":
                return "done"
            await message.reply({"you said": message.value, "wants_reply": message.wants_reply})

    async with open_engine() as engine:
        await engine.start(agent, id="q")
        pending = await engine.request("q", "ask", "status?", wait=0)
        assert not pending.replied and pending.value is None
        assert (await engine.resume("q")).status == Status.SUSPENDED
        answer = await engine.reply("q", pending.message_id)
        assert answer.replied and answer.value == {"you said": "status?", "wants_reply": True}
        await engine.send_message("q", "ask", "stop")
        assert (await engine.resume("q")).result == "done"
        assert kinds(engine.store, "q").count("replied") == 1


async def test_published_values_are_read_from_the_store_by_name(open_engine):
    async def agent(ctx: Context) -> str:
        for i in range(3):
            await ctx.publish("progress", {"done": i})
        await ctx.publish("phase", "waiting")
        await ctx.promise("go")
        await ctx.publish("phase", "finished")
        return "ok"

    async with open_engine() as engine:
        await engine.run(agent, id="v")
        value = await engine.get_value("v", "progress")
        assert value.value == {"done": 2}
        assert sorted(await engine.values("v")) == ["phase", "progress"]
        with pytest.raises(ValueNotPublished, match="no value 'nope'"):
            await engine.get_value("v", "nope")
        phase = await engine.get_value("v", "phase")
        # A wait for a newer value returns the current one when nothing newer comes in time...
        assert (await engine.get_value("v", "phase", wait=0.05)).seq == phase.seq
        await engine.resolve("v", "go", True)
        assert (await engine.resume("v")).result == "ok"
        # ... and, given the seq of one already seen, returns the newer one at once.
        newer = await engine.get_value("v", "phase", wait=5, after=phase.seq)
        assert newer.value == "finished" and newer.seq > phase.seq


async def test_a_select_over_two_receives_takes_one_message_and_leaves_the_other(open_engine):
    async def agent(ctx: Context) -> list:
        got = []
        for _ in range(2):
            index, message = await ctx.select(ctx.receive("a"), ctx.receive("b"))
            got.append([index, message.value])
        return got

    async with open_engine() as engine:
        await engine.start(agent, id="two")
        await engine.send_message("two", "a", "from a")
        await engine.send_message("two", "b", "from b")
        outcome = await engine.resume("two")
        # Both were waiting when the select began: one wins, the other is not lost.
        assert sorted(value for _, value in outcome.result) == ["from a", "from b"]
        assert kinds(engine.store, "two").count("received") == 2


async def test_a_wait_whose_deadline_passes_during_a_read_answers_what_it_has(open_engine):
    # A loaded store's read can outlast the rest of the wait: the look that follows must end
    # the wait, not sleep for a negative time.
    from runtime._messaging import _asking

    async def agent(ctx: Context) -> str:
        await ctx.publish("phase", "waiting")
        await ctx.promise("go")
        return "ok"

    async with open_engine() as engine:
        await engine.run(agent, id="slow-read")

        async def slow_read(fn, *args):
            if fn == engine.store.require:
                await anyio.sleep(0.05)  # longer than the whole wait below
            return fn(*args)

        value = await _asking.read_value(slow_read, engine.store.published, engine.store.require, "slow-read",
                                         "phase", wait=0.01, after=None)
        assert value.value == "waiting"


async def test_concurrent_senders_share_commits_and_every_message_arrives_once_in_each_senders_order(open_engine):
    # Sends made at once go through the group commit together (`apply_sends`): each still
    # lands once, after the one its sender made before it, and retried ids add nothing.
    senders, each = 10, 5
    async with open_engine() as engine:
        await engine.start(collect, senders * each, id="many")

        async def send(k: int) -> None:
            for i in range(each):
                await engine.send_message("many", "chat", [k, i], message_id=f"{k}-{i}")
                await engine.send_message("many", "chat", "again", message_id=f"{k}-{i}")  # a retried send

        async with anyio.create_task_group() as tg:
            for k in range(senders):
                tg.start_soon(send, k)
        outcome = await engine.resume("many")
        assert outcome.status == Status.COMPLETED
        got = [value for _, value in outcome.result]
        assert sorted(map(tuple, got)) == [(k, i) for k in range(senders) for i in range(each)]
        for k in range(senders):
            assert [i for sender, i in got if sender == k] == list(range(each))
        assert engine.store.next_message("many", "chat") is None


async def test_a_request_to_a_handler_this_process_runs_is_answered_while_the_caller_waits(open_engine):
    async def echo(ctx: Context) -> None:
        while True:
            message = await ctx.receive("ask")
            await message.reply(message.value)

    async with open_engine() as engine:
        await engine.start(echo, id="e")
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.serve)
            for i in range(3):
                answer = await engine.request("e", "ask", i, wait=30)
                assert answer.replied and answer.value == i
            tg.cancel_scope.cancel()
