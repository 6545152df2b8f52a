"""Crashing and resuming in runtime tests: a stand-in for the process dying, and a run that
crashes under one handler and is resumed under another (the same code, or changed code)."""

import pytest

from journal import decode_entry, kind_of
from runtime import Context

from ..waiting import leases_lapsed


class Crash(BaseException):
    """Stands in for the process dying: the engine writes nothing more."""


async def crash_then_resume(open_engine, first, second, *, id="inv", input=None, key=None):
    """Run `first` until it crashes, then resume the same invocation with `second`."""
    # A lease short enough that the resume need not wait long for it to lapse, and long
    # enough to be renewed in time on a loaded machine (at 0.05 s a PostgreSQL renewal was
    # sometimes late, and the run, taken over, ended before its crash).
    async with open_engine(lease_ttl=0.5) as engine:
        with pytest.raises(Crash):
            await engine.run(first, input, id=id, key=key)
        await leases_lapsed(engine.store)
    async with open_engine() as engine:
        engine.register(second)
        # Resume runs whatever handler entry 0 names; point it at the new code.
        from runtime._handler._handlers import _by_path

        _by_path[engine.store.get(id).handler] = second
        return await engine.resume(id), engine.store.entries(id)


def step(name):
    def fn(*args):
        return name

    fn.__name__ = name
    return fn


def program(*names, args=None):
    async def agent(ctx: Context) -> list:
        out = []
        for name in names:
            out.append(await ctx.run(name, step(name), *(args or {}).get(name, ())))
        await ctx.run("crash", crasher)
        return out

    return agent


crash_flag = {"armed": False}


def crasher():
    if crash_flag["armed"]:
        crash_flag["armed"] = False
        raise Crash()
    return None


def kinds(store, invocation_id):
    return [kind_of(decode_entry(d)) for _, d in store.entries(invocation_id)]


armed = {"on": False}


def crash_once():
    if armed["on"]:
        armed["on"] = False
        raise Crash()
