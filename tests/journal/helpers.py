"""The builders shared by the storage tests (journal.testing's), and a store double."""

import threading

from journal import MemoryStore
from journal.testing import T0 as T0
from journal.testing import acquire as acquire
from journal.testing import append as append
from journal.testing import create as create
from journal.testing import step as step

# Everything the runtime may call on a store (the `Store` protocol and the tables).
WATCHED = ("create", "get", "require", "list", "ids", "entries", "entry_count", "lease", "live_lease", "resolution",
           "due_timers", "state", "key_queue", "apply", "apply_one", "delete", "wait_for_work", "next_wake",
           "table_get", "table_scan", "table_write")


class NetworkStore(MemoryStore):
    """A store that says its calls wait on the network, and notes each call made on the loop's thread."""

    blocking = True

    def __init__(self):
        super().__init__()
        self.loop_thread = None
        self.on_loop = []

    def __getattribute__(self, name):
        value = super().__getattribute__(name)
        if name in WATCHED:
            loop_thread = super().__getattribute__("loop_thread")
            on_loop = super().__getattribute__("on_loop")

            def watched(*args, **kwargs):
                if threading.get_ident() == loop_thread:
                    on_loop.append(name)
                return value(*args, **kwargs)

            return watched
        return value
