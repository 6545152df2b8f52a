"""One rule for how `journal worker` and `journal serve` stop on SIGTERM or Ctrl-C: exit 0,
and a last line `stopped by SIGTERM (...)` saying that what was in flight is pending; a
`worker --until-idle`, a batch job, stopped before its end exits 130 as `journal run` does.
Their logs record the invocations that fail."""

import json
import signal

import pytest

from ..waiting import wait_until
from .serving import Server, wait_for

AGENTS = '''
import os
import anyio
from runtime import Context, TerminalError

async def gate(ctx: Context, request: dict) -> str:
    await ctx.run("before", lambda: "before")
    with open(request["entered"], "w") as f:
        f.write(str(os.getpid()))
    while not os.path.exists(request["marker"]):
        await anyio.sleep(0.02)
    return await ctx.run("after", lambda: "after")

async def quick() -> int:
    return 1

async def tight(ctx: Context, entered: str) -> int:
    made = 0
    while made < 300_000:  # steps that never wait for anything: nothing else pauses the handler
        await ctx.run("quick", quick)
        made += 1
        if made == 1:
            with open(entered, "w") as f:
                f.write(str(os.getpid()))
    return made

async def boom(ctx: Context, order: str) -> str:
    await ctx.run("charge", lambda: order)
    raise TerminalError(f"card declined for {order}")
'''


@pytest.fixture
def agents(tmp_path):
    path = tmp_path / "stopping_agents.py"
    path.write_text(AGENTS)
    return path


def _gate_input(tmp_path) -> tuple[str, object]:
    entered = tmp_path / "entered"
    return json.dumps({"entered": str(entered), "marker": str(tmp_path / "never")}), entered


@pytest.mark.parametrize("signum, said", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "Ctrl-C")])
def test_a_worker_stopped_by_a_signal_exits_0_and_leaves_its_invocation_pending(sh, agents, tmp_path, signum,
                                                                                  said):
    gate_input, entered = _gate_input(tmp_path)
    assert sh("start", f"{agents}:gate", "--input", gate_input, "--id", "w").returncode == 0
    worker = sh.popen("worker")
    wait_until(entered.exists, "the worker to be in the handler")
    err = sh.stopped(worker, signum)
    assert worker.returncode == 0, err
    last = err.splitlines()[-1]
    assert last.startswith(f"stopped by {said} (1 step live, 0 replayed)"), err
    assert "pending for the next worker" in last
    assert json.loads(sh("show", "w", "--json").stdout)["status"] == "pending"


def test_a_worker_until_idle_stopped_before_its_end_exits_130(sh, agents, tmp_path):
    gate_input, entered = _gate_input(tmp_path)
    assert sh("start", f"{agents}:gate", "--input", gate_input, "--id", "w").returncode == 0
    worker = sh.popen("worker", "--until-idle")
    wait_until(entered.exists, "the worker to be in the handler")
    err = sh.stopped(worker, signal.SIGTERM)
    assert worker.returncode == 130, err
    assert "interrupted before it was idle" in err.splitlines()[-1]


def test_serve_stopped_by_sigterm_follows_the_same_rule(tmp_path, agents):
    entered = tmp_path / "entered"
    server = Server(str(tmp_path / "db"), tmp_path / "serve.log", handlers=(f"gate={agents}:gate",), agents=None)
    body = {"handler": "gate", "input": {"entered": str(entered), "marker": str(tmp_path / "never")}, "id": "g"}
    assert server.client.post("/invocations", json=body).status_code == 201
    wait_for(entered.exists, what="the handler to be in flight")
    assert server.stop(signal.SIGTERM) == 0
    last = server.output().splitlines()[-1]
    assert last.startswith("stopped by SIGTERM (1 step live, 0 replayed)"), server.output()
    assert "pending for the next worker" in last


def test_the_serve_log_records_an_invocation_that_fails(tmp_path, agents):
    server = Server(str(tmp_path / "db"), tmp_path / "serve.log", handlers=(f"boom={agents}:boom",), agents=None)
    assert server.client.post("/invocations", json={"handler": "boom", "input": "o-17", "id": "b1"}).status_code \
        == 201
    server.wait_status("b1", "failed")
    wait_for(lambda: "[b1] failed" in server.output(), what="the failure in the log")
    assert server.stop(signal.SIGTERM) == 0
    [line] = [line for line in server.output().splitlines() if line.startswith("[b1]")]
    assert line == "[b1] failed: TerminalError: card declined for o-17"


def test_the_worker_log_records_an_invocation_that_fails_even_when_quiet(sh, agents):
    assert sh("start", f"{agents}:boom", "--input", '"o-18"', "--id", "b2").returncode == 0
    done = sh("worker", "--until-idle", "-q")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["[b2] failed: TerminalError: card declined for o-18"]


@pytest.mark.parametrize("durability", ["exit", "async", "sync"])
def test_ctrl_c_stops_a_run_whose_steps_never_wait(sh, agents, tmp_path, durability):
    # Each step a quick `async def` whose commit waits for nothing: Ctrl-C still reaches the
    # handler, and the invocation stays resumable.
    entered = tmp_path / "entered"
    run = sh.popen("run", f"{agents}:tight", "--input", json.dumps(str(entered)), "--id", "t",
                   "--durability", durability)
    wait_until(entered.exists, "the handler to be making steps")
    err = sh.stopped(run)
    assert run.returncode == 130, err
    assert json.loads(sh("show", "t", "--json").stdout)["status"] == "pending"
