"""`Engine.stream`: each emitted event once, in order, across a replay."""

import anyio
import pytest

from runtime import Context

from ..waiting import until

pytestmark = pytest.mark.anyio


async def test_stream_delivers_each_event_once_in_order_across_a_replay(open_engine):
    async def agent(ctx: Context) -> str:
        for i in range(3):
            await ctx.emit({"chunk": i})
        await ctx.promise("more")
        await ctx.emit({"chunk": 3})
        return "done"

    async with open_engine() as engine:
        await engine.run(agent, id="s")
        received = []

        async def consume():
            async for event in engine.stream("s"):
                received.append((event.seq, event.value["chunk"]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await until(lambda: len(received) == 3, "the stream to deliver the events journaled so far")
            await engine.resolve("s", "more", True)
            await engine.resume("s")  # replays the first three emits: not delivered again
    assert [chunk for _, chunk in received] == [0, 1, 2, 3]
    assert [seq for seq, _ in received] == sorted(seq for seq, _ in received)
