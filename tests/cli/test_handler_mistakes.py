"""The two mistakes a first handler makes most, told as what happened: a handler written
without the Context (`async def greet(name)`), and a forgotten `await` on `ctx.run`."""

from __future__ import annotations

import json

import anyio
import pytest

from runtime import Engine

HANDLERS = '''
from runtime import Context

def shout(text: str) -> str:
    return text.upper()

async def typed_first(name: str) -> str:
    return f"hello {name}"

async def untyped_only(name):
    return f"hello {name}"

async def returns_its_only_parameter(name):
    return name

async def nothing() -> int:
    return 1

async def swapped(name: str, ctx: Context) -> str:
    return await ctx.run("hello", shout, name)

async def forgot_await(ctx: Context, name: str) -> str:
    loud = ctx.run("shout", shout, name)
    return loud
'''


@pytest.fixture
def handlers(tmp_path):
    path = tmp_path / "mistakes.py"
    path.write_text(HANDLERS)
    return lambda name: f"{path}:{name}"


@pytest.mark.parametrize("name", ["typed_first", "swapped", "nothing"])
def test_a_handler_without_the_context_first_is_refused_saying_so(handlers, sh, name):
    done = sh("run", handlers(name), "--input", '"ada"')
    assert done.returncode == 2, done.stderr
    assert "first parameter" in done.stderr and "Context" in done.stderr, done.stderr
    assert "async def " in done.stderr  # the definition to write
    assert sh("ls", "--json").stdout.strip() in ("", "[]")  # nothing journaled


def test_an_input_for_a_handler_whose_one_parameter_is_not_the_context_says_where_it_went(handlers, sh):
    done = sh("run", handlers("untyped_only"), "--input", '"ada"')
    assert done.returncode == 2, done.stderr
    assert "`name`, receives the Context" in done.stderr, done.stderr
    assert "async def untyped_only(ctx: Context, name)" in done.stderr


def test_a_handler_that_returns_its_context_is_told_why(handlers, sh):
    done = sh("run", handlers("returns_its_only_parameter"), "--json")
    assert done.returncode == 1, done.stderr
    message = json.loads(done.stdout)["error"]["message"]
    assert "returned its Context" in message and "first parameter" in message, message
    assert "InvocationContext" not in message


def test_a_forgotten_await_on_ctx_run_says_an_await_is_missing(handlers, sh):
    done = sh("run", handlers("forgot_await"), "--input", '"ada"', "--json")
    assert done.returncode == 1, done.stderr
    message = json.loads(done.stdout)["error"]["message"]
    assert "`await` is missing" in message and "ctx.run" in message, message
    assert "cannot be journaled: a value of type coroutine" not in message
    assert "never awaited" not in done.stderr  # said once, by the message


def test_the_library_refuses_a_handler_without_the_context_too(tmp_path):
    async def greet(name: str) -> str:
        return name

    async def main() -> None:
        async with Engine.open(str(tmp_path / "db")) as engine:
            with pytest.raises(ValueError, match="first parameter of a handler is always the Context"):
                await engine.run(greet, "ada")

    anyio.run(main)
