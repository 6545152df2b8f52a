"""Waking a step thread on the event loop's CPU when the loop's thread waits for its call (Linux).

When the loop's thread waits for a quick call itself (`StepThreads._held`), the call and
the loop never run at the same time. Left to itself, the kernel wakes the step thread on
another CPU, an idle one, and the loop's thread back on its own once the call returns; on
a virtual machine, waking an idle virtual CPU takes tens of microseconds (W1 `exit` with a
plain step: 65 µs of a 95 µs step went to the two wake-ups). Woken on the loop's CPU, the
step thread is switched in there as the loop's thread goes to sleep on the lock, and the
loop's thread switched back in as the step thread finishes: a few microseconds each.

So the loop's thread pins the sleeping thread to its own CPU just before it wakes it, and
the thread, once awake, takes its own CPUs back before it does anything else: the pin only
chooses where it wakes. The call itself, and any thread or process it starts (which would
inherit a pin), run with every CPU the thread had. The loop's own thread is never moved.
Where the platform cannot say which CPU a thread runs on, or refuses to move threads (a
sandbox), or the process may use only one CPU, nothing is pinned.
"""

from __future__ import annotations

import os
from collections.abc import Callable


def _cpu_reader() -> Callable[[], int] | None:
    """The C library's `sched_getcpu` (the calling thread's CPU), or None where there is none."""
    try:
        if len(os.sched_getaffinity(0)) < 2:
            return None
        import ctypes

        getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
        getcpu.restype = ctypes.c_int
        getcpu.argtypes = ()
        return getcpu if getcpu() >= 0 else None
    except Exception:  # no affinity calls (not Linux), no ctypes, no such function
        return None


class ThreadPins:
    """Step threads pinned to the loop's CPU for their wake-up. `pin` runs under the step
    threads' lock, on a sleeping thread (which cannot exit meanwhile); `unpin` runs on the
    thread itself."""

    def __init__(self) -> None:
        self._getcpu: Callable[[], int] | None | bool = False  # False: not looked up yet
        self._own: dict[int, set[int]] = {}  # native thread id -> its CPUs, read before its first pin
        self.pinned: set[int] = set()

    @property
    def working(self) -> bool:
        """Whether threads are pinned here (known once one has been)."""
        return bool(self._getcpu)

    def pin(self, tid: int) -> None:
        """Put sleeping thread `tid` on the CPU the calling thread (the loop's) runs on."""
        try:
            getcpu = self._getcpu
            if getcpu is False:
                getcpu = self._getcpu = _cpu_reader()
            if getcpu is None:
                return
            cpu = getcpu()  # type: ignore[operator]
            own = self._own.get(tid)
            if own is None:
                own = self._own[tid] = os.sched_getaffinity(tid)
            if cpu not in own:  # the thread was kept off the loop's CPU: leave it so
                return
            os.sched_setaffinity(tid, (cpu,))
        except Exception:  # refused here (a sandbox's filter): leave every thread where the kernel puts it
            self._getcpu = None
            return
        self.pinned.add(tid)

    def unpin(self, tid: int) -> None:
        """Give thread `tid`, awake now, its own CPUs back."""
        self.pinned.discard(tid)
        try:
            os.sched_setaffinity(tid, self._own[tid])
        except (OSError, KeyError):  # its CPUs are no longer all allowed: the process's now
            try:
                os.sched_setaffinity(tid, os.sched_getaffinity(os.getpid()))
            except OSError:
                pass

    def forget(self, tid: int) -> None:
        """Thread `tid` is exiting."""
        self._own.pop(tid, None)
        self.pinned.discard(tid)

    def reset(self) -> None:
        """In a child after `fork`: the ids known here are the parent's threads."""
        self._own.clear()
        self.pinned.clear()
