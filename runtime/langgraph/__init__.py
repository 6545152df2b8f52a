"""LangGraph on journal (extra `journal[langgraph]`): `JournalSaver`, a checkpointer on the
journal's stores; `JournalStore`, long-term memory (a LangGraph `BaseStore`); and
`durable_node`, nodes whose `ctx.run` steps are not repeated when LangGraph runs the node
again after a crash or an `interrupt()`."""

from ._node import DurableNodeError as DurableNodeError
from ._node import durable_node as durable_node
from ._node import node_invocation_id as node_invocation_id
from ._saver import CheckpointError as CheckpointError
from ._saver import JournalSaver as JournalSaver
from ._store import JournalStore as JournalStore

__all__ = ("CheckpointError", "DurableNodeError", "JournalSaver", "JournalStore", "durable_node", "node_invocation_id")
