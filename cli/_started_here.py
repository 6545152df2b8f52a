"""What `journal run` started from this host, so that `resume` and `replay` on PostgreSQL
need no `--handler` for it.

On PostgreSQL the code to import is never read from the database: a database user need
not be allowed to choose code for this host. An invocation that `journal run` started
here is the exception: `run` notes its id and the handler it imported in a file of this
user's (`$XDG_STATE_HOME/journal/started/`, private to the user, one file per database),
and `resume` and `replay` import that handler, this user's own earlier choice, when the
database still records it under that name. Nothing read from the database chooses code.
A file or directory another user could write is ignored, as if nothing was noted.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from journal import redact_url

from ._common import fail


def _directory() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "journal" / "started"


def _ledger(url: str) -> Path:
    # One file per database, named by a digest of its URL (without its password).
    return _directory() / (hashlib.sha256(redact_url(url).encode()).hexdigest()[:32] + ".jsonl")


def note(url: str, invocation_id: str, handler: str) -> None:
    """Record that this user's `journal run` started `invocation_id` with `handler`."""
    path = _ledger(url)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(path.parent):
            return  # another user could swap the file under us: note nothing
        # Never through a link: whoever placed one would choose which file of ours grows.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_uid == os.getuid():
                os.write(fd, (json.dumps([invocation_id, handler]) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass  # only a convenience: without it, `resume` asks for --handler


def handler_for(url: str, invocation_id: str) -> str | None:
    """The handler this user's `journal run` started `invocation_id` with here, if it did."""
    path = _ledger(url)
    if not _private(path.parent):
        return None
    info = _private(path)
    if info is None:
        return None
    # Read once per version of the file: `journal replay --all` asks for every invocation,
    # and the file gains a line with every `journal run`.
    version = (info.st_ino, info.st_size, info.st_mtime_ns)
    cached = _read.get(path)
    if cached is None or cached[0] != version:
        try:
            cached = _read[path] = (version, _parse(path))
        except OSError:
            return None
    return cached[1].get(invocation_id)


_read: dict[Path, tuple[tuple[int, int, int], dict[str, str]]] = {}


def _parse(path: Path) -> dict[str, str]:
    noted: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                noted_id, handler = json.loads(line)
            except (ValueError, TypeError):
                continue  # a line cut short by a crash
            if isinstance(noted_id, str) and isinstance(handler, str):
                noted[noted_id] = handler  # the latest note of an id counts
    return noted


def required(url: str, invocation_id: str) -> str:
    """`handler_for`, or the error that asks for --handler."""
    noted = handler_for(url, invocation_id)
    if noted is None:
        raise fail("on PostgreSQL the handler is not read from the database, and `journal run` did not start "
                   "this invocation from this host: pass --handler NAME=TARGET (the name the invocation "
                   "records; `journal show ID` prints it)")
    refused = refusal(noted)
    if refused is not None:
        raise fail(refused)
    return noted


def refusal(handler: str) -> str | None:
    """Why the noted `handler` may not be imported now, if it may not.

    The note names the code, not its contents: a file that another user can write since
    (or that changed hands) is refused as it would be if an LMDB journal named it."""
    from runtime import check_recorded
    from runtime.errors import HandlerNotFound

    try:
        check_recorded(handler, named_by="`journal run` started this invocation from here with")
    except HandlerNotFound as exc:
        return str(exc)
    return None


def _private(path: Path) -> os.stat_result | None:
    """Its status if it is owned by this user and writable by nobody else."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info if info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) else None
