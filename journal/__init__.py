"""Storage for `journal`: the entry model, its codec, the `Store` protocol and its backends
(`journal.backends`: LMDB, PostgreSQL, in-memory), the group-commit append path
(`journal.commit`), and maintenance (trim, compact, check, export, migrate). Knows nothing
about handlers or the command line."""

import importlib
import typing

from ._codec import DEFAULT_MAX_ENTRY_BYTES as DEFAULT_MAX_ENTRY_BYTES
from ._codec import UnencodableValue as UnencodableValue
from ._codec import decode_entry as decode_entry
from ._codec import decode_value as decode_value
from ._codec import digest as digest
from ._codec import encode_entry as encode_entry
from ._codec import encode_value as encode_value
from ._entries import NIL as NIL
from ._entries import PRIOR_SET as PRIOR_SET
from ._entries import PRIOR_UNSET as PRIOR_UNSET
from ._entries import TERMINAL_KINDS as TERMINAL_KINDS
from ._entries import Called as Called
from ._entries import Cancelled as Cancelled
from ._entries import CancelReceived as CancelReceived
from ._entries import Completed as Completed
from ._entries import ContinuedAsNew as ContinuedAsNew
from ._entries import Emitted as Emitted
from ._entries import Entry as Entry
from ._entries import ErrorInfo as ErrorInfo
from ._entries import Failed as Failed
from ._entries import Frame as Frame
from ._entries import Now as Now
from ._entries import Patched as Patched
from ._entries import Promise as Promise
from ._entries import Published as Published
from ._entries import Received as Received
from ._entries import Replied as Replied
from ._entries import Selected as Selected
from ._entries import Sleep as Sleep
from ._entries import Started as Started
from ._entries import StateGot as StateGot
from ._entries import StateKeys as StateKeys
from ._entries import StateSet as StateSet
from ._entries import Step as Step
from ._entries import Tagged as Tagged
from ._entries import kind_of as kind_of
from ._entries import name_of as name_of
from ._fork import AlreadyRetried as AlreadyRetried
from ._fork import ForkError as ForkError
from ._fork import finish_retry_copy as finish_retry_copy
from ._fork import fork as fork
from ._fork import retries as retries
from ._fork import retry_fork as retry_fork
from ._fork import retry_lineage as retry_lineage
from ._fork import retry_point as retry_point
from ._ids import expand_id as expand_id
from ._ids import validate_id as validate_id
from ._listing import Cursor as Cursor
from ._listing import Damaged as Damaged
from ._listing import HandlerSummary as HandlerSummary
from ._listing import Page as Page
from ._listing import Query as Query
from ._records import FINISHED as FINISHED
from ._records import HOST as HOST
from ._records import MESSAGE_WAIT as MESSAGE_WAIT
from ._records import PRIORITY_MAX as PRIORITY_MAX
from ._records import PRIORITY_MIN as PRIORITY_MIN
from ._records import InboxMessage as InboxMessage
from ._records import InvocationRecord as InvocationRecord
from ._records import Lease as Lease
from ._records import PromiseType as PromiseType
from ._records import PublishedValue as PublishedValue
from ._records import Resolution as Resolution
from ._records import SentMessage as SentMessage
from ._records import Status as Status
from ._schedules import OVERLAPS as OVERLAPS
from ._schedules import RECENT_KEPT as RECENT_KEPT
from ._schedules import Fired as Fired
from ._schedules import ScheduleRecord as ScheduleRecord
from ._schema import check as check_schema
from ._schema import example as schema_example
from ._schema import promise_type as promise_type
from ._store import Acquire as Acquire
from ._store import Append as Append
from ._store import Capability as Capability
from ._store import Continue as Continue
from ._store import Create as Create
from ._store import OpResult as OpResult
from ._store import Renew as Renew
from ._store import RequestCancel as RequestCancel
from ._store import Resolve as Resolve
from ._store import Send as Send
from ._store import SetStatus as SetStatus
from ._store import Store as Store
from ._store import Talk as Talk
from ._store import Transition as Transition
from ._store import WorkBell as WorkBell
from ._tables import TableDelete as TableDelete
from ._tables import TableDeletePrefix as TableDeletePrefix
from ._tables import TablePut as TablePut
from ._tables import Tables as Tables
from ._tags import check_tag as check_tag
from ._tags import check_tags as check_tags
from ._tags import parse_tag as parse_tag
from ._time import from_us as from_us
from ._time import iso_from_us as iso_from_us
from ._time import now_us as now_us
from .backends import FORMAT_VERSIONS as FORMAT_VERSIONS
from .backends import Migration as Migration
from .backends import open_store as open_store
from .backends.in_memory import MemoryStore as MemoryStore
from .backends.lmdb import FORMAT_VERSION as FORMAT_VERSION
from .backends.lmdb import LmdbStore as LmdbStore
from .backends.lmdb import check_store_dir as check_store_dir
from .backends.lmdb import default_path as default_path
from .backends.postgres import is_postgres_url as is_postgres_url
from .backends.postgres import redact_url as redact_url
from .kv import lease_is_live as lease_is_live
from .maintenance import Problem as Problem
from .maintenance import check as check
from .maintenance import compact as compact
from .maintenance import migrate as migrate
from .maintenance import parse_retention as parse_retention
from .maintenance import trim as trim
from .maintenance import trim_due as trim_due
from .views import entry_view as entry_view
from .views import export as export

__all__ = (
    "DEFAULT_MAX_ENTRY_BYTES", "FINISHED", "HOST", "OpResult", "NIL", "FORMAT_VERSION", "TERMINAL_KINDS",
    "Acquire", "Append", "Capability", "Called", "CancelReceived", "ContinuedAsNew", "Selected", "StateGot",
    "StateKeys", "StateSet", "Continue", "Create", "Cancelled", "Committer", "Completed", "Durability", "Emitted", "Entry",
    "ErrorInfo", "Failed", "InvocationRecord", "Lease", "LmdbStore", "MemoryStore", "PostgresStore", "open_store", "is_postgres_url", "redact_url", "store_patience", "Now", "Patched",
    "Promise", "Renew", "RequestCancel", "Resolution", "Resolve", "SetStatus", "Sleep", "Started",
    "Status", "Step", "Store", "Transition", "UnencodableValue", "ForkError", "fork", "retry_fork", "finish_retry_copy", "retry_point", "AlreadyRetried", "retries", "retry_lineage",
    "Problem", "check", "compact", "entry_view", "export", "trim", "trim_due", "parse_retention",
    "decode_entry", "decode_value", "digest", "encode_entry", "encode_value", "from_us", "iso_from_us", "kind_of", "now_us",
    "lease_is_live", "name_of", "validate_id", "expand_id", "check_store_dir", "default_path", "PRIOR_SET", "PRIOR_UNSET",
    "TableDelete", "TableDeletePrefix", "TablePut", "Tables", "Frame", "PromiseType", "check_schema",
    "schema_example", "promise_type",
    "FORMAT_VERSIONS", "Migration", "migrate", "Cursor", "Damaged", "Page", "Query",
    "Tagged", "HandlerSummary", "check_tag", "check_tags", "parse_tag",
    "Chunk", "LiveChannel", "LiveFeed", "LiveFollower", "MAX_CHUNK_BYTES", "Sent", "PRIORITY_MAX", "PRIORITY_MIN",
    "Fired", "ScheduleRecord", "OVERLAPS", "RECENT_KEPT",
    "MESSAGE_WAIT", "WorkBell", "InboxMessage", "PublishedValue", "SentMessage", "Send", "Talk", "Published", "Received",
    "Replied",
)

# Imported on first use: the append path brings in anyio and asyncio, which reading a
# store (`journal ls`, `journal show`) does without.
_LAZY = {"Committer": ".commit", "Durability": ".commit"}
# Live output (`journal/_live.py`): only processes that stream or follow chunks need it.
_LAZY.update(dict.fromkeys(("Chunk", "LiveChannel", "LiveFeed", "LiveFollower", "MAX_CHUNK_BYTES", "Sent"), "._live"))
# PostgreSQL's store: only processes with a PostgreSQL store need its modules.
_LAZY.update(PostgresStore=".backends.postgres._store", store_patience=".backends.postgres._connect")

if typing.TYPE_CHECKING:  # a type checker sees them as ordinary exports
    from ._live import MAX_CHUNK_BYTES as MAX_CHUNK_BYTES
    from ._live import Chunk as Chunk
    from ._live import LiveChannel as LiveChannel
    from ._live import LiveFeed as LiveFeed
    from ._live import LiveFollower as LiveFollower
    from ._live import Sent as Sent
    from .backends.postgres._connect import store_patience as store_patience
    from .backends.postgres._store import PostgresStore as PostgresStore
    from .commit import Committer as Committer
    from .commit import Durability as Durability


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value
