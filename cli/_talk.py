"""Talking to a running invocation: `journal send`, `journal request`, `journal get`."""

from __future__ import annotations

from typing import Any

import click

from journal import UnencodableValue, encode_value, iso_from_us
from runtime import Engine

from . import _render as render
from ._common import SUSPENDED, Exit, db_option, edge, fail, json_option, out
from ._report import Progress
from ._run import _execute, read_input


def _value(value: str | None, topic: str) -> Any:
    if value is None:
        return None
    decoded, _ = read_input(value, None, name=f"the message on topic {topic!r}")
    try:
        encode_value(decoded)
    except UnencodableValue as exc:
        raise fail(f"the message on topic {topic!r} cannot be journaled: {exc}") from None
    return decoded


def _wait(wait: float | None) -> float | None:
    if wait is not None and not 0 <= wait <= 86_400:
        raise fail(f"--wait {wait:g} must be a number of seconds from 0 to 86400")
    return wait


@click.command()
@click.argument("invocation_id", metavar="ID")
@click.argument("topic")
@click.argument("value", metavar="[JSON]", required=False)
@click.option("--message-id", "message_id", metavar="MID",
              help="The message's id: sending the same MID again delivers it once (a retried send). Default: a new one.")
@db_option
@json_option
@edge
def send(invocation_id: str, topic: str, value: str | None, message_id: str | None, db: str | None,
         as_json: bool) -> None:
    """Send a message to an invocation on a topic.

    JSON (default null; `-` reads stdin) goes into the invocation's inbox on TOPIC, where its
    handler's `ctx.receive(TOPIC)` gets it, in arrival order. A handler suspended in that
    receive becomes pending (a running `journal worker` continues it). Prints the message id.

    The same --message-id twice is delivered once. Refused (exit 2): a finished invocation,
    and a value that does not fit the type the handler receives TOPIC with.

    Example:

    \b
        journal send chat-42 user '"What did we decide about the venue?"' --message-id web-1017
    """
    decoded = _value(value, topic)

    async def work(engine: Engine) -> tuple[str, Any]:
        sent = await engine.send_message(invocation_id, topic, decoded, message_id=message_id)
        return sent, await engine.committer.read(engine.store.require, invocation_id)

    sent, record = _execute(db, "sync", Progress(False), work)
    if as_json:
        click.echo(render.to_json({"id": record.id, "topic": topic, "message_id": sent, "status": record.status.value}))
    else:
        out(f"sent message {render.safe(sent)} on topic {render.safe(topic)!r} to {render.safe(record.id)}; "
            f"it is {record.status.value}")


@click.command()
@click.argument("invocation_id", metavar="ID")
@click.argument("topic")
@click.argument("value", metavar="[JSON]", required=False)
@click.option("--wait", type=float, default=30.0, show_default=True, metavar="S",
              help="Seconds to wait for the reply.")
@click.option("--message-id", "message_id", metavar="MID",
              help="The request's id: the same MID again is not sent twice, and waits for the same reply.")
@db_option
@json_option
@edge
def request(invocation_id: str, topic: str, value: str | None, wait: float, message_id: str | None,
            db: str | None, as_json: bool) -> None:
    """Send a message that asks for a reply, and print the reply.

    The handler's `ctx.receive(TOPIC)` gets it and answers with `await message.reply(value)`;
    the reply is printed as JSON once its entry is committed. If --wait ends first, exit 3
    and print the message id: the same command with `--message-id MID` waits for that
    reply again, without sending the request twice.

    Example:

    \b
        journal request chat-42 status '{}' --wait 10
    """
    decoded = _value(value, topic)
    wait = _wait(wait)

    async def work(engine: Engine) -> Any:
        return await engine.request(invocation_id, topic, decoded, wait=wait, message_id=message_id)

    reply = _execute(db, "sync", Progress(False), work)
    if as_json:
        click.echo(render.to_json({"id": invocation_id, "message_id": reply.message_id, "replied": reply.replied,
                                   "reply": reply.value}))
    elif reply.replied:
        click.echo(render.to_json(reply.value))
    if not reply.replied:
        raise Exit(SUSPENDED, f"no reply within {wait:g} s; wait for it again with: journal request "
                              f"{render.safe(invocation_id)} {render.safe(topic)} --message-id {reply.message_id}")


@click.command()
@click.argument("invocation_id", metavar="ID")
@click.argument("name", required=False)
@click.option("--wait", type=float, default=None, metavar="S",
              help="Wait up to S seconds for a newer value than the current one (or than --after's).")
@click.option("--after", type=int, default=None, metavar="SEQ",
              help="With --wait: a value published after entry SEQ (the `seq` of one already seen).")
@db_option
@json_option
@edge
def get(invocation_id: str, name: str | None, wait: float | None, after: int | None, db: str | None,
        as_json: bool) -> None:
    """Print a value an invocation published (`ctx.publish`), or all of them.

    Read from the store: no worker and none of the handler's code needs to run, so it
    answers while every worker is down. Without NAME, lists every name with its latest
    value. Exit 2 if it has published nothing under NAME.

    Example:

    \b
        journal get research-7 progress --wait 30
    """
    wait = _wait(wait)
    if name is None and (wait is not None or after is not None):
        raise fail("--wait and --after need a NAME: the value to wait for")

    async def work(engine: Engine) -> Any:
        if name is None:
            return await engine.values(invocation_id)
        return await engine.get_value(invocation_id, name, wait=wait, after=after)

    found = _execute(db, "sync", Progress(False), work)
    if name is None:
        if as_json:
            click.echo(render.to_json({"values": {n: _json(v) for n, v in found.items()}}))
        elif not found:
            out(f"{render.safe(invocation_id)} has published no value")
        for n, v in found.items() if not as_json else ():
            out(f"{render.safe(n)}\t{render.to_json(v.value, pretty=False)}")
        return
    click.echo(render.to_json(_json(found) if as_json else found.value))


def _json(found: Any) -> dict[str, Any]:
    return {"name": found.name, "value": found.value, "seq": found.seq, "at": iso_from_us(found.at)}
