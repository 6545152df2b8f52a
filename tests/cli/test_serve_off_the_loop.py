"""With a store whose calls wait on the network (`blocking`, as PostgreSQL's), no route of
`journal serve` calls the store on the event loop's thread."""

import threading

import anyio
import pytest

from runtime import Context, Engine

from ..journal.helpers import NetworkStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_the_http_routes_reach_a_network_store_only_off_the_loop():
    import httpx

    from runtime.http import create_app

    async def agent(ctx: Context, text: str) -> str:
        ctx.state.set("last", text)
        return await ctx.promise("go")

    store = NetworkStore()
    store.loop_thread = threading.get_ident()
    async with Engine.open(store=store, handlers={"agent": agent}) as engine:
        transport = httpx.ASGITransport(app=create_app(engine, handlers={"agent": agent}, poll=0.01))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            started = await http.post("/invocations", json={"handler": "agent", "input": "hi", "id": "a", "key": "k"})
            assert started.status_code == 201, started.text
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: engine.serve(idle_exit=True))
            assert (await http.get("/invocations/a")).json()["status"] == "suspended"
            for path in ("/invocations", "/invocations/a/entries", "/invocations/a/result", "/keys/k/state"):
                assert (await http.get(path)).status_code == 200, path
            assert (await http.post("/invocations/a/promises/go", json={"value": "went"})).status_code == 200
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: engine.serve(idle_exit=True))
            async with http.stream("GET", "/invocations/a/events") as events:
                body = b"".join([chunk async for chunk in events.aiter_bytes()])
            assert b"event: end" in body and b"went" in body
            assert (await http.post("/invocations/a/cancel")).status_code == 202
    assert store.on_loop == []
