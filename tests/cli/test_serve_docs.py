"""Every `curl` example of docs/http.md runs, in order, against a real `journal serve`."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from .serving import Server

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "http.md"
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
# Fail on an HTTP error status, as a script would want to.
PRELUDE = 'curl() { command curl --fail-with-body --max-time 30 "$@"; }\n'


def curl_blocks() -> list[str]:
    return [b for b in BLOCK.findall(PAGE.read_text()) if b.lstrip().startswith("curl ")]


@pytest.fixture
def server(tmp_path):
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log",
               handlers=(f"refund={ROOT / 'examples' / 'approval.py'}:refund",), agents=None)
    yield s
    s.stop()


def test_every_curl_example_of_the_http_page_runs_in_order(server, tmp_path):
    blocks = curl_blocks()
    assert len(blocks) >= 10
    env = {**os.environ, "URL": server.url}

    def run(block: str) -> str:
        done = subprocess.run(["bash", "-c", PRELUDE + block], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=60)
        assert done.returncode == 0, f"{block}\nexit {done.returncode}: {done.stdout}{done.stderr}"
        return done.stdout

    start, *rest = blocks
    assert json.loads(run(start))["id"] == "refund-1001"
    run(start.replace("refund-1001", "refund-1002").replace("A-1001", "A-1002"))  # the page's second refund
    for invocation_id in ("refund-1001", "refund-1002"):
        server.wait_status(invocation_id, "suspended")
    outputs = {}
    for block in rest:
        out = outputs[block.split("\n")[0]] = run(block)
        if block.startswith("curl -s -X POST $URL/batches "):
            env["BATCH"] = json.loads(out)["id"]  # the page's next block follows the batch it made
        if "/events" not in block:
            assert _documents(out), f"{block}\nprinted no JSON: {out!r}"
    listed = json.loads(outputs['curl -s "$URL/invocations?status=suspended&limit=50"'])
    assert {i["id"] for i in listed["invocations"]} == {"refund-1001", "refund-1002"}
    result = json.loads(outputs['curl -s "$URL/invocations/refund-1001/result?wait=20"'])
    assert result["status"] == "completed" and result["result"]["by"] == "dana"
    assert "event: end" in outputs["curl -sN $URL/invocations/refund-1001/events"]
    assert server.client.get("/invocations/refund-1002/result", params={"wait": 20}).json()["status"] == "failed"
    # The fork with an edited approval runs from it; the retry of the rejected one asks again.
    forked = server.client.get("/invocations/refund-1001-lee/result", params={"wait": 20}).json()
    assert forked["status"] == "completed" and forked["result"]["by"] == "lee"
    (retried,) = [json.loads(out)["id"] for line, out in outputs.items() if "/refund-1002/retry" in line]
    assert retried.startswith("refund-1002-retry-")
    waiting = server.wait_status(retried, "suspended")["waiting_on"]
    assert [(w["kind"], w["name"]) for w in waiting] == [("promise", "approval")]


def _documents(text: str) -> list:
    """The JSON documents curl printed back to back (one per command of a block)."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        doc, at = decoder.raw_decode(text, at)
        out.append(doc)
        while at < len(text) and text[at].isspace():
            at += 1
    return out
