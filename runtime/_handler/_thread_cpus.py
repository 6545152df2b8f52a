"""A step thread kept on the event loop's CPU while the loop's thread waits for its call (Linux).

When the loop's thread waits for a quick call itself (`StepThreads._held`), the call and
the loop never run at the same time. Left to itself, the kernel wakes the step thread on
another CPU, an idle one, and the loop's thread back on its own once the call returns; on
a virtual machine, waking an idle virtual CPU takes tens of microseconds (W1 `exit` with a
plain step: 65 µs of a 95 µs step went to the two wake-ups). On the loop's CPU the step
thread is switched in there as the loop's thread goes to sleep on the lock, and the loop's
thread switched back in as the step thread goes to sleep: a few microseconds each.

A pinned thread gets its CPUs back before it runs a call the loop does not wait for, and
as soon as the loop stops waiting for its call (the call took longer than the loop waits):
a call that runs beside the loop must be free to run on another CPU. Where the platform
cannot say which CPU a thread runs on, or refuses to move threads (a sandbox), or the
process may use only one CPU, nothing is pinned.
"""

from __future__ import annotations

import os
from collections.abc import Callable


def _cpu_reader() -> Callable[[], int] | None:
    """The C library's `sched_getcpu` (the calling thread's CPU), or None where there is none."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        if len(os.sched_getaffinity(0)) < 2:
            return None
        import ctypes

        getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):
        return None
    getcpu.restype = ctypes.c_int
    getcpu.argtypes = ()
    return getcpu if getcpu() >= 0 else None


class ThreadPins:
    """The step threads pinned to a CPU, each with the CPUs it had before. Used under the
    step threads' lock, which also keeps a thread from exiting while it is moved."""

    def __init__(self) -> None:
        self._getcpu: Callable[[], int] | None | bool = False  # False: not looked up yet
        self.pinned: dict[int, tuple[int, set[int]]] = {}  # native thread id -> (CPU, CPUs before)

    def pin_to_caller(self, tid: int) -> None:
        """Put thread `tid` on the CPU the calling thread (the loop's) runs on."""
        getcpu = self._getcpu
        if getcpu is False:
            getcpu = self._getcpu = _cpu_reader()
        if getcpu is None:
            return
        cpu = getcpu()  # type: ignore[operator]
        held = self.pinned.get(tid)
        if held is not None and held[0] == cpu:
            return
        try:
            before = held[1] if held is not None else os.sched_getaffinity(tid)
            if cpu not in before:  # the thread was kept off the loop's CPU: leave it so
                return
            os.sched_setaffinity(tid, (cpu,))
        except OSError:  # refused here (a sandbox's filter): leave every thread where the kernel puts it
            self._getcpu = None
            return
        self.pinned[tid] = (cpu, before)

    def release(self, tid: int) -> None:
        """Give thread `tid` back the CPUs it had before it was pinned."""
        held = self.pinned.pop(tid, None)
        if held is not None:
            try:
                os.sched_setaffinity(tid, held[1])
            except OSError:
                pass

    def forget(self, tid: int) -> None:
        """Thread `tid` is exiting."""
        self.pinned.pop(tid, None)
