"""The append path: group commit (`Committer`) and the flusher that makes commits durable.

Imported on first use (`journal.Committer`): it brings in anyio and asyncio, which reading
a store (`journal ls`, `journal show`) does without.
"""

from ._committer import Committer as Committer
from ._committer import Durability as Durability

__all__ = ("Committer", "Durability")
