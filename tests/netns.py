"""Two network namespaces joined by a cable the test can pull: a real network partition.

`Partition()` creates namespaces `jpf-srv-<id>` and `jpf-cli-<id>` joined by a veth
pair (`jpf<id>s` / `jpf<id>c`), with the addresses `SERVER_IP` and `CLIENT_IP` on its two
ends, inside the namespaces only: nothing is added to the test's own network. A server
started in one (`PgServer(netns=...)`) and a process started in the other (`wrap`)
reach each other only over that link; `down()` takes it down, as a switch that died
would (packets vanish, no connection is told), and `up()` brings it back. `remove()`
deletes both namespaces, and with them the pair. Needs root (`ip netns`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

SERVER_IP, CLIENT_IP = "10.251.77.1", "10.251.77.2"


def available() -> str | None:
    """Why partitions cannot be made here, or None if they can."""
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Partition:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.server, self.client = f"jpf-srv-{tag}", f"jpf-cli-{tag}"
        self._ends = (f"jpf{tag}s", f"jpf{tag}c")
        self._made: list[str] = []
        try:
            for ns in (self.server, self.client):
                _ip("netns", "add", ns)
                self._made.append(ns)
                _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", self.server, "link", "add", self._ends[0], "type", "veth", "peer", "name", self._ends[1],
                "netns", self.client)
            for ns, end, address in ((self.server, self._ends[0], SERVER_IP), (self.client, self._ends[1], CLIENT_IP)):
                _ip("-n", ns, "addr", "add", f"{address}/30", "dev", end)
                _ip("-n", ns, "link", "set", end, "up")
        except BaseException:
            self.remove()
            raise

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run inside the client's namespace (`ip netns exec` execs it: same pid)."""
        return ["ip", "netns", "exec", self.client, *argv]

    def down(self) -> None:
        _ip("-n", self.client, "link", "set", self._ends[1], "down")

    def up(self) -> None:
        _ip("-n", self.client, "link", "set", self._ends[1], "up")

    def remove(self) -> None:
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self._made.clear()
