"""The current code of the handlers whose recorded journals are kept in this folder."""

import anyio

from runtime import Context


def classify(text: str) -> str:
    return "billing" if "refund" in text else "other"


def draft(category: str, text: str) -> str:
    return f"[{category}] re: {text}"


async def triage(ctx: Context, ticket: str) -> dict:
    category = await ctx.run("classify", classify, ticket)
    opened = ctx.now()
    reply = await ctx.run("draft", draft, category, ticket)
    approved = await ctx.promise("approve", type=bool)
    return {"category": category, "reply": reply if approved else None, "at": opened.isoformat()}


async def fan_out(ctx: Context, words: list) -> list:
    async def one(word):
        await anyio.sleep(0)
        return await ctx.run(f"upper-{word}", str.upper, word)

    return await ctx.gather(*(one(w) for w in words))
