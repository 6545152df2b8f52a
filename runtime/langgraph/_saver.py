"""`JournalSaver`: a LangGraph checkpointer on the journal's stores.

Tables (keys from `_keys`, every part escaped, so they sort part by part):
    lg_checkpoints  thread ns checkpoint_id           -> _Saved
    lg_writes       thread ns checkpoint_id task_path task_id idx(u32 BE, offset) -> _Write
    lg_blobs        thread ns channel version         -> _Blob (a channel's value at a version)
    lg_runs         run_id thread ns checkpoint_id    -> b"" (for delete_for_runs)

A checkpoint stores only the channels whose version changed (`new_versions`), like
LangGraph's own savers, so a super-step costs one small batch, whatever the state's size.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import random
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

import msgspec
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from journal import TableDelete, TableDeletePrefix, TablePut
from journal.errors import CorruptEntry, JournalError

from ._keys import open_tables, part, parts, split

_TableOp = TablePut | TableDelete | TableDeletePrefix

CHECKPOINTS, WRITES, BLOBS, RUNS = "lg_checkpoints", "lg_writes", "lg_blobs", "lg_runs"
# Where LangGraph puts a run's durability in the config it passes (`langgraph._internal._constants`).
CONFIG_KEY_DURABILITY = "__pregel_durability"
_IDX_OFFSET = 1 << 31  # special writes have negative indexes; they sort first


class _Saved(msgspec.Struct, array_like=True, frozen=True):
    type: str
    checkpoint: bytes  # without channel_values, which live in lg_blobs
    metadata_type: str
    metadata: bytes
    parent_id: str | None
    run_id: str | None = None


class _Write(msgspec.Struct, array_like=True, frozen=True):
    channel: str
    type: str
    value: bytes


class _Blob(msgspec.Struct, array_like=True, frozen=True):
    type: str
    value: bytes


_enc = msgspec.msgpack.Encoder()
_saved_dec = msgspec.msgpack.Decoder(_Saved)
_write_dec = msgspec.msgpack.Decoder(_Write)
_blob_dec = msgspec.msgpack.Decoder(_Blob)


@contextlib.contextmanager
def _damage(thread_id: str, ns: str, checkpoint_id: str) -> Iterator[None]:
    """Bytes of a checkpoint (its record, a channel's blob, a pending write) that do not decode
    are the project's `CorruptEntry`, naming the thread and the checkpoint: not a bare msgspec
    or ormsgpack error. Decoding stays the allowlisted one: nothing is imported to try harder."""
    try:
        yield
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError, KeyError) as exc:
        where = f"thread {thread_id!r}" + (f" (namespace {ns!r})" if ns else "")
        raise CorruptEntry(
            f"the LangGraph checkpoint {checkpoint_id!r} of {where} does not decode "
            f"({type(exc).__name__}: {exc}); the store's bytes for it are damaged. Restore the store from a "
            "backup, or resume the thread from an earlier checkpoint (pass its checkpoint_id)",
            invocation_id=thread_id,
        ) from None


def _waits_for_disk(config: RunnableConfig) -> bool:
    """Whether a checkpoint is fsynced before `put` returns: not when the graph runs with
    LangGraph's `durability="async"`, which saves in the background while the next super-step
    runs and accepts losing the latest checkpoints to a crash. The checkpoint is still
    committed (a killed process loses nothing) and reaches the disk within 100 ms."""
    return config.get("configurable", {}).get(CONFIG_KEY_DURABILITY) != "async"


class JournalSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on a journal store.

    `db` is a store directory (LMDB; created if missing) or a store object
    (`journal.LmdbStore`, `journal.MemoryStore`).

    Durability: every call is committed before it returns, so nothing is lost when the
    process is killed. With `durable=True` (the default) a checkpoint (`put`) is also on
    disk when `put` returns; pending writes (`put_writes`) reach the disk with the next
    checkpoint's fsync, or within 100 ms in the background, whichever is first. Losing
    them to an OS crash only means their task runs again, as after any crash between
    super-steps; the checkpoints, which a graph resumes from, are never lost. A graph run
    with LangGraph's `durability="async"` has asked not to wait for its checkpoints: they
    are committed at once and reach the disk within 100 ms, as with `durable=False`. With
    `durable=False` everything reaches the disk within 100 ms in the background.

    Values are deserialised with LangGraph's msgpack allowlist in strict mode: only
    LangGraph's safe types and the types a compiled graph registers (its state schema)
    are rebuilt; nothing else is imported.
    """

    def __init__(self, db: Any, *, durable: bool = True, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde or JsonPlusSerializer(allowed_msgpack_modules=None))
        self.store, self._owned = open_tables(db)
        self.durable = durable
        start_flusher = getattr(self.store, "start_background_sync", None)
        if start_flusher is not None:
            start_flusher(0.1)  # flushes pending writes (and all of durable=False) within 100 ms

    def __repr__(self) -> str:
        return f"JournalSaver({self.store!r})"

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the store if this saver opened it (a store passed in stays open)."""
        if self._owned:
            self._owned = False
            self.store.close()

    def __enter__(self) -> JournalSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> JournalSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- reads ---------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            raw = self.store.table_get(CHECKPOINTS, parts(thread_id, ns) + checkpoint_id.encode())
            if raw is None:
                return None
        else:
            found = self.store.table_scan(CHECKPOINTS, parts(thread_id, ns), reverse=True, limit=1)
            if not found:
                return None
            key, raw = found[0]
            checkpoint_id = key[len(parts(thread_id, ns)):].decode()
        with _damage(thread_id, ns, checkpoint_id):
            return self._tuple(thread_id, ns, checkpoint_id, _saved_dec.decode(raw))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        conf = config["configurable"] if config else {}
        prefix = b""
        if conf.get("thread_id") is not None:
            prefix = part(str(conf["thread_id"]))
            if conf.get("checkpoint_ns") is not None:
                prefix += part(conf["checkpoint_ns"])
        wanted_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        count = 0
        for key, raw in self.store.table_scan(CHECKPOINTS, prefix, reverse=True):
            if limit is not None and count >= limit:
                return
            (thread_id, ns), rest = split(key, 2)
            checkpoint_id = rest.decode()
            if wanted_id and checkpoint_id != wanted_id:
                continue
            if before_id and checkpoint_id >= before_id:
                continue
            with _damage(thread_id, ns, checkpoint_id):
                saved = _saved_dec.decode(raw)
                metadata = self.serde.loads_typed((saved.metadata_type, saved.metadata))
                if filter and not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
                found_tuple = self._tuple(thread_id, ns, checkpoint_id, saved, metadata)
            count += 1
            yield found_tuple

    def _tuple(self, thread_id: str, ns: str, checkpoint_id: str, saved: _Saved,
               metadata: Any = None) -> CheckpointTuple:
        checkpoint = self.serde.loads_typed((saved.type, saved.checkpoint))
        values = {}
        for channel, version in checkpoint["channel_versions"].items():
            raw = self.store.table_get(BLOBS, parts(thread_id, ns, channel, str(version)))
            if raw is not None:
                blob = _blob_dec.decode(raw)
                if blob.type != "empty":
                    values[channel] = self.serde.loads_typed((blob.type, blob.value))
        checkpoint["channel_values"] = values
        writes = []
        for key, raw in self.store.table_scan(WRITES, parts(thread_id, ns, checkpoint_id)):
            (_, _, _, _, task_id), _ = split(key, 5)
            write = _write_dec.decode(raw)
            writes.append((task_id, write.channel, self.serde.loads_typed((write.type, write.value))))
        if metadata is None:
            metadata = self.serde.loads_typed((saved.metadata_type, saved.metadata))

        def conf(cid: str) -> RunnableConfig:
            return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

        return CheckpointTuple(
            config=conf(checkpoint_id), checkpoint=checkpoint, metadata=metadata,
            parent_config=conf(saved.parent_id) if saved.parent_id else None, pending_writes=writes,
        )

    # -- writes --------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        self._write(self._put_ops(config, checkpoint, metadata, new_versions), fsync=_waits_for_disk(config))
        return self._next_config(config, checkpoint)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        self._write(self._writes_ops(config, writes, task_id, task_path), fsync=False)

    def _write(self, ops: builtins.list[_TableOp], fsync: bool = True) -> None:
        self.store.table_write(ops, durable=fsync and self.durable)

    async def _awrite(self, ops: builtins.list[_TableOp], fsync: bool = True) -> None:
        if getattr(self.store, "blocking", False):  # PostgreSQL: the whole transaction waits on the network
            await asyncio.to_thread(self.store.table_write, ops, durable=fsync and self.durable)
            return
        # The commit is microseconds and runs here; only the fsync leaves the event loop.
        self.store.table_write(ops, durable=False)
        if fsync and self.durable:
            await asyncio.to_thread(self.store.sync)

    def _put_ops(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                 new_versions: ChannelVersions) -> builtins.list[_TableOp]:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        copy: dict[str, Any] = dict(checkpoint)
        values = copy.pop("channel_values", {})
        ops: list[_TableOp] = []
        for channel, version in new_versions.items():
            type_, value = self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b"")
            ops.append(TablePut(BLOBS, parts(thread_id, ns, channel, str(version)), _enc.encode(_Blob(type_, value))))
        meta = get_checkpoint_metadata(config, metadata)
        run_id = meta.get("run_id")
        run_id = str(run_id) if run_id is not None else None
        type_, data = self.serde.dumps_typed(copy)
        meta_type, meta_data = self.serde.dumps_typed(meta)
        saved = _Saved(type_, data, meta_type, meta_data, conf.get("checkpoint_id"), run_id)
        ops.append(TablePut(CHECKPOINTS, parts(thread_id, ns) + checkpoint["id"].encode(), _enc.encode(saved)))
        if run_id is not None:
            ops.append(TablePut(RUNS, parts(run_id, thread_id, ns) + checkpoint["id"].encode(), b""))
        return ops

    def _writes_ops(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                    task_path: str) -> builtins.list[_TableOp]:
        conf = config["configurable"]
        prefix = parts(str(conf["thread_id"]), conf.get("checkpoint_ns", ""), conf["checkpoint_id"], task_path, task_id)
        ops: list[_TableOp] = []
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            type_, data = self.serde.dumps_typed(value)
            # A task's regular writes are saved once (a retried task keeps the first);
            # special writes (errors, interrupts, resumes) replace what was there.
            ops.append(TablePut(WRITES, prefix + (idx + _IDX_OFFSET).to_bytes(4, "big"),
                                _enc.encode(_Write(channel, type_, data)), overwrite=idx < 0))
        return ops

    @staticmethod
    def _next_config(config: RunnableConfig, checkpoint: Checkpoint) -> RunnableConfig:
        conf = config["configurable"]
        return {"configurable": {
            "thread_id": conf["thread_id"], "checkpoint_ns": conf.get("checkpoint_ns", ""),
            "checkpoint_id": checkpoint["id"],
        }}

    def get_next_version(self, current: str | int | None, channel: None = None) -> str:
        """The next version of a channel: no I/O. The random tail keeps two branches forked
        from one checkpoint from writing different values under the same version."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- maintenance ---------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        self._write(self._thread_delete_ops(str(thread_id)))

    def _thread_delete_ops(self, thread_id: str) -> builtins.list[_TableOp]:
        prefix = part(thread_id)
        ops: list[_TableOp] = [TableDeletePrefix(t, prefix) for t in (CHECKPOINTS, WRITES, BLOBS)]
        for key, raw in self.store.table_scan(CHECKPOINTS, prefix):
            ops.extend(self._run_index_delete(key, raw))
        return ops

    @staticmethod
    def _run_index_delete(key: bytes, raw: bytes) -> builtins.list[_TableOp]:
        run_id = _saved_dec.decode(raw).run_id
        return [] if run_id is None else [TableDelete(RUNS, part(run_id) + key)]

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        ops: list[_TableOp] = []
        for run_id in run_ids:
            for key, _ in self.store.table_scan(RUNS, part(str(run_id))):
                (_, thread_id, ns), rest = split(key, 3)
                ops += [
                    TableDelete(RUNS, key),
                    TableDelete(CHECKPOINTS, parts(thread_id, ns) + rest),
                    TableDeletePrefix(WRITES, parts(thread_id, ns, rest.decode())),
                ]
        if ops:
            self._write(ops)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = part(str(source_thread_id)), part(str(target_thread_id))
        ops: list[_TableOp] = []
        for table in (CHECKPOINTS, WRITES, BLOBS):
            for key, value in self.store.table_scan(table, source):
                ops.append(TablePut(table, target + key[len(source):], value))
                if table == CHECKPOINTS:
                    run_id = _saved_dec.decode(value).run_id
                    if run_id is not None:
                        ops.append(TablePut(RUNS, part(run_id) + target + key[len(source):], b""))
        if ops:
            self._write(ops)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise CheckpointError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        ops: list[_TableOp] = []
        for thread_id in map(str, thread_ids):
            ops += self._thread_delete_ops(thread_id) if strategy == "delete" else self._keep_latest_ops(thread_id)
        if ops:
            self._write(ops)

    def _keep_latest_ops(self, thread_id: str) -> builtins.list[_TableOp]:
        """Delete every checkpoint but the newest of each namespace, with their writes, and
        every blob the kept checkpoints do not use."""
        latest: dict[str, tuple[bytes, bytes]] = {}
        ops: list[_TableOp] = []
        # Backwards: the first checkpoint met in each namespace is its newest.
        for key, raw in self.store.table_scan(CHECKPOINTS, part(thread_id), reverse=True):
            (_, ns), rest = split(key, 2)
            if ns not in latest:
                latest[ns] = (key, raw)
                continue
            ops += [TableDelete(CHECKPOINTS, key), TableDeletePrefix(WRITES, parts(thread_id, ns, rest.decode()))]
            ops += self._run_index_delete(key, raw)
        kept = set()
        for ns, (_, raw) in latest.items():
            saved = _saved_dec.decode(raw)
            for channel, version in self.serde.loads_typed((saved.type, saved.checkpoint))["channel_versions"].items():
                kept.add(parts(thread_id, ns, channel, str(version)))
        ops += [TableDelete(BLOBS, key) for key, _ in self.store.table_scan(BLOBS, part(thread_id)) if key not in kept]
        return ops

    # -- async: the same operations, with fsyncs off the event loop ----------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if getattr(self.store, "blocking", False):  # PostgreSQL: the reads wait on the network
            return await asyncio.to_thread(self.get_tuple, config)
        return self.get_tuple(config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        items: Iterable[CheckpointTuple]
        if getattr(self.store, "blocking", False):
            items = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        else:
            items = self.list(config, filter=filter, before=before, limit=limit)
        for item in items:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        await self._awrite(self._put_ops(config, checkpoint, metadata, new_versions), fsync=_waits_for_disk(config))
        return self._next_config(config, checkpoint)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await self._awrite(self._writes_ops(config, writes, task_id, task_path), fsync=False)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._awrite(self._thread_delete_ops(str(thread_id)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


class CheckpointError(JournalError, ValueError):
    """A checkpointer call was given something it cannot act on."""
