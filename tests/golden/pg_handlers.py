"""The current code of the handlers whose format-1 PostgreSQL store is kept in `postgres-v1/`."""

from runtime import Context


def classify(text: str) -> str:
    return "billing" if "refund" in text else "other"


def shout(words: list[str]) -> list[str]:
    return [w.upper() for w in words]


async def ticket(ctx: Context, text: str) -> dict:
    category = await ctx.run("classify", classify, text)
    approved = await ctx.promise("approve", type=bool)
    return {"category": category, "approved": approved, "text": text}


async def nap(ctx: Context, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "rested"


async def turn(ctx: Context, message: str) -> int:
    history = await ctx.state.get("history") or []
    ctx.state.set("history", [*history, message])
    return len(history) + 1


async def child(ctx: Context, words: list[str]) -> list[str]:
    return await ctx.run("shout", shout, words)


async def parent(ctx: Context, words: list[str]) -> list[str]:
    return await ctx.call(child, words, id="parent-child")
