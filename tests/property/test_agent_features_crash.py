"""A crash at every journal write in the middle of streaming and gather. Keyed state, child
invocations, continue-as-new and select have crash-and-resume tests in
tests/runtime/test_threads.py, test_child_invocations.py,
test_continue_as_new.py, test_combinators.py and tests/examples/test_example_chat.py."""

import anyio

from journal import Status
from runtime import Context
from runtime.testing import check_determinism


def _word(n: int) -> str:
    return f"w{n}"


async def streaming(ctx: Context, n: int) -> list:
    out = []
    for i in range(n):
        await ctx.emit({"progress": i})
        out.append(await ctx.run(f"chunk-{i}", _word, i))
    return out


async def fast(x: str) -> str:
    return x


async def slow(x: str) -> str:
    await anyio.sleep(0.01)
    return x


async def gathering(ctx: Context, q: str) -> list:
    return await ctx.gather(ctx.run("a", fast, q), ctx.run("b", slow, q), ctx.run("c", fast, q))


def test_streaming_survives_a_crash_at_every_write():
    report = check_determinism(streaming, 3)
    assert report.status == Status.COMPLETED and report.crash_points >= 12


def test_gather_survives_a_crash_at_every_write():
    report = check_determinism(gathering, "q")
    assert report.status == Status.COMPLETED and report.result == ["q", "q", "q"]
