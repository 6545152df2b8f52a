"""`--handler [NAME=]TARGET`, one parameter type for every command that takes it.

`worker`, `serve`, `resume`, `cancel` and `replay` accept a bare TARGET (recorded, and so looked
up, by its canonical path, as `journal run` records it) or NAME=TARGET. The syntax is checked when click parses the
option; the code is imported later, by `load_handlers`, once the command knows it needs it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import click

from runtime import is_handler_name, load_handler
from runtime.errors import HandlerNotFound

from ._common import fail


def importable_cwd() -> None:
    """`package.module:function` targets resolve from the current directory, as with `python -m`."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def load(target: str) -> Any:
    importable_cwd()
    try:
        return load_handler(target)
    except HandlerNotFound:
        raise
    except Exception as exc:  # the handler's own module failed to import (SyntaxError, NameError, ...)
        raise fail(f"cannot load handler {target!r}: importing it raised {type(exc).__name__}: {exc}") from None


class Spec(NamedTuple):
    name: str | None  # None: a bare TARGET, known by its canonical path
    target: str


class HandlerSpec(click.ParamType):
    name = "handler"

    def __init__(self, *, names_required: bool = False) -> None:
        self.names_required = names_required

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Spec:
        if isinstance(value, Spec):
            return value
        name, sep, target = str(value).partition("=")
        if self.names_required and (not sep or not name or not target):
            self.fail(f"{value!r} is not NAME=TARGET (for example refund=examples/approval.py:refund)",
                      param, ctx)
        if not sep:
            return Spec(None, str(value))
        if not name or not target or not is_handler_name(name):
            self.fail(f"{value!r}: expected NAME=TARGET or TARGET (a NAME has no ':' or '/')", param, ctx)
        return Spec(name, target)


def handler_option(help: str, *, names_required: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    metavar = "NAME=TARGET" if names_required else "[NAME=]TARGET"
    return click.option("--handler", "handler_specs", metavar=metavar, multiple=True,
                        type=HandlerSpec(names_required=names_required), help=help)


def load_handlers(specs: tuple[Spec, ...]) -> dict[str, Callable[..., Any]]:
    """The functions this process may run, by the name invocations record."""
    handlers: dict[str, Callable[..., Any]] = {}
    for spec in specs:
        fn = load(spec.target)
        key = spec.name or fn.__journal_path__
        if key in handlers and handlers[key] is not fn:
            raise fail(f"--handler {key!r} is given twice, for different functions; each NAME names one handler")
        handlers[key] = fn
    return handlers


def lone_target(specs: tuple[Spec, ...]) -> str | None:
    """The TARGET of a `--handler` given once and bare: the code to run whatever name the journal
    records (`resume`, `replay`). NAME=TARGET pairs, or several, are looked up by recorded name."""
    return specs[0].target if len(specs) == 1 and specs[0].name is None else None
