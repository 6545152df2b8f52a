"""Golden stores and views: what older releases wrote, which this one must keep reading."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))


def writable_copy(name: str, where: Path) -> str:
    """A copy of golden store `name` at `where/store` (opening a store creates its lock file,
    and LMDB wants its directory private), so a test never touches the committed one."""
    path = where / "store"
    shutil.copytree(os.path.join(HERE, name), path)
    os.chmod(path, 0o700)
    return str(path)
