"""A `journal serve` subprocess on loopback for the HTTP tests, and ways to wait on it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from ..waiting import wait_until
from .openapi_check import AnswerCheck, Document

HERE = Path(__file__).parent
AGENTS = HERE / "serve_agents.py"
HANDLERS = ("approve=approval", "echo=echo", "quick=quick", "gate=gate", "remember=remember", "drifting=drifting", "binary=binary", "flaky=flaky", "stream=streaming", "planned=planned",
            "checkout=checkout", "drafting=drafting", "typed=typed_approval", "named=named", "keyed=keyed_charge",
            "limited=limited")
_URL = re.compile(r"serving on (http://\S+) ")


def wait_for(condition: Callable[[], Any], timeout: float = 20.0, what: str = "the condition") -> Any:
    """The value of `condition` once it is truthy (`wait_until`, with this module's deadline)."""
    return wait_until(condition, what, timeout=timeout)


class Server:
    """`journal serve` in its own process; `url` once it answers /healthz."""

    def __init__(self, db: str, log: Path, *args: str, env: dict[str, str] | None = None,
                 handlers: tuple[str, ...] = HANDLERS, token: str | None = None, http: str = "127.0.0.1:0",
                 agents: Path | None = AGENTS, ready: bool = True) -> None:
        self.log = log
        self.token = token
        command = [sys.executable, "-m", "cli", "serve", "--db", db, "--http", http, "-q", *args]
        for spec in handlers:  # NAME=function of `agents`, or NAME=TARGET when `agents` is None
            name, _, fn = spec.partition("=")
            command += ["--handler", f"{name}={agents}:{fn}" if agents is not None else spec]
        full_env = {**os.environ, **(env or {})}
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=full_env)
        # A server on every interface (0.0.0.0) is reached through loopback.
        self.url = wait_for(self._announced, what=f"the server to announce its address in {log}").replace(
            "//0.0.0.0:", "//127.0.0.1:")
        # A request that changes state must be JSON (the server refuses anything another web
        # page could send): the client says so even when it sends no body.
        headers: dict[str, str | bytes] = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = b"Bearer " + token.encode("utf-8")  # as a client sends a UTF-8 token
        self.answers = AnswerCheck()  # every answer fits the server's /openapi.json
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=30,
                                   event_hooks={"response": [self.answers]})
        if ready:  # (not: its store may not be open yet)
            wait_for(self._healthy, what="/healthz to answer")
            self.answers.document = Document(self.client.get("/openapi.json").json())

    def _announced(self) -> str | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"journal serve exited {self.proc.returncode}: {self.output()}")
        found = _URL.search(self.output())
        return found.group(1) if found else None

    def _healthy(self) -> bool:
        try:
            return self.client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def status(self, invocation_id: str) -> dict:
        response = self.client.get(f"/invocations/{quote(invocation_id, safe='')}")
        assert response.status_code == 200, response.text
        return response.json()

    def wait_status(self, invocation_id: str, status: str, timeout: float = 20.0) -> dict:
        return wait_for(lambda: (doc := self.status(invocation_id))["status"] == status and doc,
                        timeout, f"invocation {invocation_id} to be {status}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"journal serve did not stop on signal {sig}: {self.output()}") from None
