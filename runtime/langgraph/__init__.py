"""LangGraph on journal (extra `journal[langgraph]`): `JournalSaver`, a checkpointer on the
journal's stores; `JournalStore`, long-term memory (a LangGraph `BaseStore`); and
`durable_node`, nodes whose `ctx.run` steps are not repeated when LangGraph runs the node
again after a crash or an `interrupt()`."""

from ._saver import CheckpointError as CheckpointError
from ._saver import JournalSaver as JournalSaver

__all__ = ("CheckpointError", "JournalSaver")
