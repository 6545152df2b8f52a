"""A retry whose copy a crash cut short (between the fork's two transactions) is finished,
not left parked for ever: what a batch that made it before the crash relies on."""

from __future__ import annotations

import pytest

import journal._fork
from journal import Status, finish_retry_copy, retry_fork
from runtime import Context, Engine

pytestmark = pytest.mark.anyio

FIXED = {"on": False}


def _charge(n: int) -> str:
    if not FIXED["on"]:
        raise RuntimeError("card declined")
    return f"charged {n}"


async def charge(ctx: Context, n: int) -> str:
    looked = await ctx.run("look", lambda: f"order {n}")
    return looked + " " + await ctx.run("pay", _charge, n)


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_a_retry_cut_short_between_its_two_transactions_is_copied_and_runs(tmp_path, monkeypatch):
    FIXED["on"] = False
    async with Engine.open(str(tmp_path / "db")) as engine:
        failed = await engine.run(charge, 7, id="order-7")
        assert failed.status == "failed"

        def killed(*args, **kwargs):
            raise SystemExit("killed between the fork's transactions")

        with monkeypatch.context() as patch:
            patch.setattr(journal._fork, "_fill", killed)
            with pytest.raises(SystemExit):
                retry_fork(engine.store, "order-7")
        parked = engine.store.get("order-7-retry-1")
        assert parked.status == Status.DIVERGED and "is being copied" in parked.divergence
        assert [seq for seq, _ in engine.store.entries(parked.id)] == [0]

        copied = finish_retry_copy(engine.store, parked)
        assert copied.status == Status.PENDING
        # The same prefix a whole retry copies: the step that succeeded, not the failed one.
        assert [seq for seq, _ in engine.store.entries(copied.id)] == [0, 1]
        assert finish_retry_copy(engine.store, copied) == copied  # a finished copy is left alone

        FIXED["on"] = True
        done = await engine.resume(copied.id)
    assert done.status == "completed" and done.result == "order 7 charged 7"
