"""LangGraph on journal (extra `journal-agents[langgraph]`): `JournalSaver`, a checkpointer on the
journal's stores; `JournalStore`, long-term memory (a LangGraph `BaseStore`); and
`durable_node`, nodes whose `ctx.run` steps are not repeated when LangGraph runs the node
again after a crash or an `interrupt()`."""

import importlib
import typing

__all__ = ("CheckpointError", "DurableNodeError", "JournalSaver", "JournalStore", "durable_node", "node_invocation_id")

# Imported on first use: a process that only checkpoints (`JournalSaver`) never loads the
# engine that `durable_node` runs on, nor LangGraph's store interface.
_LAZY = {
    "CheckpointError": "._saver", "JournalSaver": "._saver", "JournalStore": "._store",
    "DurableNodeError": "._node", "durable_node": "._node", "node_invocation_id": "._node",
}

if typing.TYPE_CHECKING:  # a type checker sees them as ordinary exports
    from ._node import DurableNodeError as DurableNodeError
    from ._node import durable_node as durable_node
    from ._node import node_invocation_id as node_invocation_id
    from ._saver import CheckpointError as CheckpointError
    from ._saver import JournalSaver as JournalSaver
    from ._store import JournalStore as JournalStore


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
