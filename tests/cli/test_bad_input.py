"""Bad input and faults, over every command: each is a documented exit code and a message,
never a traceback, and it leaves a store that `journal check` passes with the invocations
made before it untouched.

Each case runs against a store that already holds a completed invocation (`done`) and a
suspended one (`waiting`); after the case both must be exactly as they were.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli import cli

from ..tmpfs import small_tmpfs
from ..waiting import wait_until
from .conftest import HERE, target

FAULTY = HERE / "faulty.py"
USAGE, FAILED, SUSPENDED, INTERRUPTED = 2, 1, 3, 130


def f(name: str) -> str:
    return f"{FAULTY}:{name}"


@dataclass
class Case:
    """`journal ARGV --db DB` exits `code`; `setup(tmp_path, db)` may prepare files and return
    substitutions for the argv (`{name}`), `env` replaces the environment's JOURNAL_DB."""

    name: str
    argv: list[str]
    code: int
    stdin: str | None = None
    setup: Callable[[Path, str], dict[str, str]] | None = None
    use_db: bool = True
    env: dict[str, str] = field(default_factory=dict)
    says: str | None = None  # a phrase the message must contain
    after: Callable[[Any, Path, str], None] | None = None  # more checks on the result


# -- setups ---------------------------------------------------------------------------------------


def _file(tmp: Path, db: str) -> dict[str, str]:
    (tmp / "afile").write_text("not a store")
    return {"file": str(tmp / "afile")}


def _dangling(tmp: Path, db: str) -> dict[str, str]:
    os.symlink(tmp / "nowhere", tmp / "dangling")
    return {"dangling": str(tmp / "dangling")}


def _deep(tmp: Path, db: str) -> dict[str, str]:
    (tmp / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    return {"deep": str(tmp / "deep.json")}


def _latin1(tmp: Path, db: str) -> dict[str, str]:
    (tmp / "latin1.json").write_bytes(b'"caf\xe9"')
    return {"latin1": str(tmp / "latin1.json")}


def _syntax(tmp: Path, db: str) -> dict[str, str]:
    (tmp / "broken.py").write_text("async def h(ctx:\n")
    (tmp / "nameerror.py").write_text("undefined_name\nasync def h(ctx): pass\n")
    return {"broken": str(tmp / "broken.py"), "nameerror": str(tmp / "nameerror.py")}


def _clash(tmp: Path, db: str) -> dict[str, str]:
    where = tmp / "project"
    where.mkdir()
    (where / "cli.py").write_text("VALUE = 'mine'\n")
    (where / "agent.py").write_text("import cli\nasync def h(ctx):\n    return cli.VALUE\n")
    return {"clash": f"{where / 'agent.py'}:h"}


def _module_clash(tmp: Path, db: str) -> dict[str, str]:
    (tmp / "runtime.py").write_text("VALUE = 'mine'\n")
    (tmp / "my_agents.py").write_text("import runtime\nasync def h(ctx):\n    return runtime.VALUE\n")
    return {}


def _recorded(handler: str) -> Callable[[Path, str], dict[str, str]]:
    """An invocation `planted` whose record names `handler`, written through the Store API."""

    def setup(tmp: Path, db: str) -> dict[str, str]:
        from journal import InvocationRecord, LmdbStore, Started, Status, digest, encode_entry, encode_value

        payload = tmp / "payload.py"
        marker = tmp / "payload-ran"
        payload.write_text(f"open({str(marker)!r}, 'w').close()\nasync def f(ctx):\n    return 1\n")
        payload.chmod(0o666)
        name = handler.format(payload=payload)
        raw = encode_value(None)
        with LmdbStore(db) as store:
            store.create(InvocationRecord("planted", name, Status.PENDING, 1, 1, None, digest(bytes(raw))),
                         encode_entry(Started(name, raw, 1, None, digest(bytes(raw)))))
            store.sync()
        return {"marker": str(marker)}

    return setup


def _payload_not_run(result: Any, tmp: Path, db: str) -> None:
    assert not (tmp / "payload-ran").exists(), "the recorded handler's module was imported"


def _no_escape(result: Any, tmp: Path, db: str) -> None:
    for text in (result.stdout, result.stderr):
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text


def _hostile_run(tmp: Path, db: str) -> dict[str, str]:
    _invoke(["run", f("hostile"), "--input", "1", "--id", "hostile"], db)
    _invoke(["run", f("hostile_failure"), "--input", "1", "--id", "hostile-failed"], db)
    return {}


def _planted_store_error(kind: str) -> Callable[[Path, str], dict[str, str]]:
    """A copy of the store, damaged; the case points --db at the copy."""

    def setup(tmp: Path, db: str) -> dict[str, str]:
        copy = tmp / "damaged"
        shutil.copytree(db, copy)
        if kind == "lock-symlink":
            (tmp / "victim.txt").write_text("precious")
            os.remove(copy / "lock.mdb")
            os.symlink(tmp / "victim.txt", copy / "lock.mdb")
        elif kind == "data-symlink":
            os.rename(copy / "data.mdb", tmp / "elsewhere.mdb")
            os.symlink(tmp / "elsewhere.mdb", copy / "data.mdb")
        elif kind == "data-hardlink":
            os.link(copy / "data.mdb", tmp / "second-name.mdb")
        elif kind == "truncated":
            _truncate_into_the_data(copy)
        elif kind == "garbage":
            (copy / "data.mdb").write_bytes(os.urandom(300))
        elif kind == "tiny":
            (copy / "data.mdb").write_bytes(b"x")
        elif kind == "world-writable":
            os.chmod(copy, 0o777)
        return {"damaged": str(copy)}

    return setup


def _truncate_into_the_data(store: Path) -> None:
    """Cut the data file to half the pages its last commit uses (the file may run on past
    them: room written ahead, `journal/backends/lmdb/_ahead.py`)."""
    import lmdb

    env = lmdb.open(str(store), readonly=True, lock=False, max_dbs=16)
    used = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    env.close()
    with open(store / "data.mdb", "r+b") as fh:
        fh.truncate(used // 2)


def _victim_intact(result: Any, tmp: Path, db: str) -> None:
    assert (tmp / "victim.txt").read_text() == "precious"


def _corrupt_copy(tmp: Path, db: str, invocation_id: str = "done") -> dict[str, str]:
    """A copy of the store in which entry 1 of `invocation_id` is garbage."""
    import lmdb

    copy = tmp / "damaged"
    shutil.copytree(db, copy)
    env = lmdb.open(str(copy), max_dbs=16)
    entries = env.open_db(b"entries")
    with env.begin(write=True) as txn:
        txn.put(invocation_id.encode() + b"\x00" + (1).to_bytes(4, "big"), b"\xc1 not msgpack", db=entries)
    env.close()
    return {"damaged": str(copy)}


def _once_each(result: Any, tmp: Path, db: str) -> None:
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and "does not decode" in lines[0], lines  # not again as a seq gap
    assert lines[0].count("(") == lines[0].count(")"), lines  # no stray parenthesis


def _status_is(invocation_id: str, status: str, where: str = "{db}") -> Callable[[Any, Path, str], None]:
    def check(result: Any, tmp: Path, db: str) -> None:
        shown = _invoke(["show", invocation_id, "--json"], where.format(db=db, damaged=str(tmp / "damaged")))
        assert json.loads(shown.stdout)["status"] == status

    return check


def _unloadable_worker(tmp: Path, db: str) -> dict[str, str]:
    gone = tmp / "gone.py"
    gone.write_text("async def h(ctx, x):\n    return x\n")
    _invoke_library_start(db, f"{gone}:h", 1, "orphan")
    _invoke_library_start(db, f("echo"), 2, "runnable")
    gone.unlink()
    return {}


def _invoke_library_start(db: str, handler: str, value: Any, invocation_id: str) -> None:
    """Start (not run) an invocation from another process, so this one never imports its handler."""
    code = ("import sys, anyio, json\nfrom runtime import Engine\n"
            "async def main():\n"
            "    async with Engine.open(sys.argv[1]) as engine:\n"
            "        await engine.start(sys.argv[2], json.loads(sys.argv[3]), id=sys.argv[4])\n"
            "anyio.run(main)\n")
    subprocess.run([sys.executable, "-c", code, db, handler, json.dumps(value), invocation_id], check=True,
                   timeout=60)


def _worker_went_on(result: Any, tmp: Path, db: str) -> None:
    statuses = {i["id"]: i["status"] for i in json.loads(_invoke(["ls", "--json"], db).stdout)}
    assert statuses["runnable"] == "completed" and statuses["orphan"] == "diverged"
    assert result.stderr.count("parked") == 1
    shown = _invoke(["show", "orphan"], db).stdout
    assert "gone.py" in shown and "does not exist" in shown


# -- the cases ------------------------------------------------------------------------------------

GREET = target("greet")

CASES = [
    # run: the target
    Case("run-no-target", ["run"], USAGE),
    Case("run-unknown-option", ["run", GREET, "--bogus"], USAGE),
    Case("run-target-without-colon", ["run", str(FAULTY)], USAGE, says="is not of the form"),
    Case("run-target-empty-function", ["run", f"{FAULTY}:"], USAGE),
    Case("run-target-empty-module", ["run", ":echo"], USAGE),
    Case("run-target-file-missing", ["run", "/nonexistent/agent.py:h"], USAGE, says="does not exist"),
    Case("run-target-module-missing", ["run", "no_such_module_xyz:h"], USAGE, says="cannot import module"),
    Case("run-target-attribute-missing", ["run", f("nope")], USAGE, says="has no attribute"),
    Case("run-target-not-async", ["run", f("not_async"), "--input", "1"], USAGE, says="not an async function"),
    Case("run-target-three-params", ["run", f("three_params"), "--input", "1"], USAGE, says="at most one input"),
    Case("run-target-no-params", ["run", f("no_params")], USAGE, says="its first parameter must be the Context"),
    Case("run-target-syntax-error", ["run", "{broken}:h"], USAGE, setup=_syntax, says="SyntaxError"),
    Case("run-target-import-raises", ["run", "{nameerror}:h"], USAGE, setup=_syntax, says="NameError"),
    Case("run-target-is-directory", ["run", "/tmp:h"], USAGE),
    Case("run-target-beside-own-cli-py", ["run", "{clash}"], USAGE, setup=_clash, says="journal's own package"),
    Case("run-module-target-beside-own-runtime-py", ["run", "my_agents:h"], USAGE, setup=_module_clash,
         says="journal's own package 'runtime'"),
    # run: the input
    Case("run-input-not-json", ["run", GREET, "--input", "{not json"], USAGE, says="--input is not valid JSON"),
    Case("run-input-empty", ["run", GREET, "--input", ""], USAGE, says="not valid JSON"),
    Case("run-input-and-file", ["run", GREET, "--input", '"a"', "--input-file", "x.json"], USAGE, says="not both"),
    Case("run-input-file-missing", ["run", GREET, "--input-file", "/nonexistent.json"], USAGE),
    Case("run-input-file-directory", ["run", GREET, "--input-file", "/tmp"], USAGE),
    Case("run-input-file-not-utf8", ["run", GREET, "--input-file", "{latin1}"], USAGE, setup=_latin1),
    Case("run-input-stdin-not-json", ["run", GREET, "--input", "-"], USAGE, stdin="{oops", says="stdin"),
    Case("run-input-huge-int", ["run", f("echo"), "--input", "123456789012345678901234567890"], USAGE,
         says="cannot be journaled"),
    Case("run-input-negative-huge-int", ["run", f("echo"), "--input", "-99999999999999999999999"], USAGE),
    Case("run-input-nested-100000-deep", ["run", f("echo"), "--input-file", "{deep}"], USAGE, setup=_deep,
         says="nested too deeply"),
    Case("run-input-nested-deep-stdin", ["run", f("echo"), "--input", "-"], USAGE,
         stdin="[" * 50_000 + "]" * 50_000, says="nested too deeply"),
    Case("run-input-wrong-type", ["run", target("greet"), "--input", "42"], USAGE, says="does not fit"),
    Case("run-input-struct-field-type", ["run", f("order"), "--input", '{"item": "x", "qty": "many"}'], USAGE),
    Case("run-input-struct-missing-field", ["run", f("order"), "--input", '{"item": "x"}'], USAGE),
    Case("run-input-for-no-input-handler", ["run", f("no_input"), "--input", "1"], USAGE, says="takes no input"),
    Case("run-missing-input", ["run", GREET], USAGE, says="--input"),
    # run: ids, keys, options
    Case("run-id-empty", ["run", GREET, "--input", '"a"', "--id", ""], USAGE, says="empty"),
    Case("run-id-control-char", ["run", GREET, "--input", '"a"', "--id", "a\x1bb"], USAGE, says="control character"),
    Case("run-id-too-long", ["run", GREET, "--input", '"a"', "--id", "x" * 5000], USAGE),
    Case("run-id-conflict", ["run", GREET, "--input", '"Bob"', "--id", "done"], USAGE, says="different input"),
    Case("run-key-control-char", ["run", GREET, "--input", '"a"', "--key", "k\x07"], USAGE),
    Case("run-key-empty", ["run", GREET, "--input", '"a"', "--key", ""], USAGE),
    Case("run-durability-bogus", ["run", GREET, "--input", '"a"', "--durability", "never"], USAGE),
    # run: handlers that misbehave (documented outcomes)
    Case("run-result-2-pow-70", ["run", f("huge_result"), "--input", "1", "--id", "h70"], FAILED,
         says="cannot be journaled", after=_status_is("h70", "failed")),
    Case("run-step-result-2-pow-70", ["run", f("huge_step"), "--input", "1", "--id", "s70"], 0,
         after=_status_is("s70", "completed")),
    Case("run-result-unencodable", ["run", f("unencodable_result"), "--input", "1", "--id", "obj"], FAILED,
         says="cannot be journaled"),
    Case("run-handler-sys-exit", ["run", f("exits"), "--input", "1", "--id", "exit5"], FAILED,
         says="sys.exit(5)", after=_status_is("exit5", "failed")),
    Case("run-handler-keyboard-interrupt", ["run", f("interrupts"), "--input", "1", "--id", "ki"], INTERRUPTED,
         says="journal resume ki", after=_status_is("ki", "pending")),
    Case("run-handler-raises", ["run", f("raises"), "--input", "1", "--id", "raised"], FAILED,
         says="the handler broke"),
    Case("run-hostile-output", ["run", f("hostile"), "--input", "1", "--id", "h", "--progress"], 0, after=_no_escape),
    Case("run-hostile-failure", ["run", f("hostile_failure"), "--input", "1", "--id", "hf"], FAILED,
         after=_no_escape),
    # store paths
    Case("db-is-a-file", ["ls", "--db", "{file}"], USAGE, setup=_file, use_db=False),
    Case("env-db-is-a-file", ["run", GREET, "--input", '"a"'], USAGE, setup=_file, use_db=False,
         env={"JOURNAL_DB": "{file}"}, says="not a directory"),
    Case("env-db-dangling-symlink", ["run", GREET, "--input", '"a"'], USAGE, setup=_dangling, use_db=False,
         env={"JOURNAL_DB": "{dangling}"}, says="symlink"),
    Case("env-db-below-a-file", ["run", GREET, "--input", '"a"'], USAGE, setup=_file, use_db=False,
         env={"JOURNAL_DB": "{file}/store"}, says="cannot"),
    Case("env-db-below-a-file-ls", ["ls"], USAGE, setup=_file, use_db=False, env={"JOURNAL_DB": "{file}/store"}),
    Case("db-missing-show", ["show", "done", "--db", "/nonexistent/store"], USAGE, use_db=False,
         says="no journal store"),
    Case("db-missing-check", ["check", "--db", "/nonexistent/store"], USAGE, use_db=False),
    Case("db-missing-trim", ["trim", "--db", "/nonexistent/store"], USAGE, use_db=False),
    Case("db-missing-compact", ["compact", "--db", "/nonexistent/store"], USAGE, use_db=False),
    Case("db-missing-resume", ["resume", "done", "--db", "/nonexistent/store"], USAGE, use_db=False),
    Case("store-lock-symlink-ls", ["ls", "--db", "{damaged}"], USAGE, setup=_planted_store_error("lock-symlink"),
         use_db=False, says="symlink", after=_victim_intact),
    Case("store-lock-symlink-run", ["run", GREET, "--input", '"a"', "--db", "{damaged}"], USAGE,
         setup=_planted_store_error("lock-symlink"), use_db=False, after=_victim_intact),
    Case("store-data-symlink", ["ls", "--db", "{damaged}"], USAGE, setup=_planted_store_error("data-symlink"),
         use_db=False, says="symlink"),
    Case("store-data-hardlink", ["ls", "--db", "{damaged}"], USAGE, setup=_planted_store_error("data-hardlink"),
         use_db=False, says="hard links"),
    Case("store-data-garbage", ["ls", "--db", "{damaged}"], USAGE, setup=_planted_store_error("garbage"),
         use_db=False, says="not an LMDB data file"),
    Case("store-data-one-byte", ["check", "--db", "{damaged}"], USAGE, setup=_planted_store_error("tiny"),
         use_db=False),
    Case("store-world-writable-warns", ["ls", "--db", "{damaged}"], 0, setup=_planted_store_error("world-writable"),
         use_db=False, says="can be written by other users"),
    # show, tail, ls, export, state
    Case("show-unknown-id", ["show", "nope"], USAGE, says="no invocation 'nope'"),
    Case("show-no-id", ["show"], USAGE),
    Case("show-hostile", ["show", "hostile"], 0, setup=_hostile_run, after=_no_escape),
    Case("show-hostile-failed", ["show", "hostile-failed"], 0, setup=_hostile_run, after=_no_escape),
    Case("tail-hostile", ["tail", "hostile"], 0, setup=_hostile_run, after=_no_escape),
    Case("ls-hostile", ["ls"], 0, setup=_hostile_run, after=_no_escape),
    Case("export-hostile-is-json", ["export", "hostile"], 0, setup=_hostile_run, after=_no_escape),
    Case("tail-unknown-id", ["tail", "nope"], USAGE),
    Case("tail-negative-lines", ["tail", "done", "-n", "-1"], USAGE),
    Case("ls-bogus-status", ["ls", "--status", "bogus"], USAGE),
    Case("ls-limit-zero", ["ls", "--limit", "0"], USAGE),
    Case("export-unknown-id", ["export", "nope"], USAGE),
    Case("export-bogus-format", ["export", "done", "--format", "xml"], USAGE),
    # resolve
    Case("resolve-unknown-id", ["resolve", "nope", "approval", "true"], USAGE),
    Case("resolve-bad-json", ["resolve", "waiting", "approval", "not json"], USAGE,
         says="the value for promise 'approval' is not valid JSON"),
    Case("resolve-value-and-reject", ["resolve", "waiting", "approval", "true", "--reject", "no"], USAGE),
    Case("resolve-finished", ["resolve", "done", "approval", "true"], USAGE, says="already completed"),
    Case("resolve-name-control-char", ["resolve", "waiting", "a\x01", "true"], USAGE),
    Case("resolve-huge-int", ["resolve", "waiting", "approval", "123456789012345678901234567890"], USAGE,
         says="cannot be journaled"),
    Case("resolve-deep-json", ["resolve", "waiting", "approval", "-"], USAGE, stdin="[" * 50_000 + "]" * 50_000),
    Case("resolve-no-name", ["resolve", "waiting"], USAGE),
    # cancel
    Case("cancel-unknown-id", ["cancel", "nope"], USAGE),
    Case("cancel-completed", ["cancel", "done"], USAGE, says="already completed; there is nothing to cancel"),
    Case("cancel-no-id", ["cancel"], USAGE),
    # fork
    Case("fork-unknown-id", ["fork", "nope", "--at", "1"], USAGE),
    Case("fork-at-zero", ["fork", "done", "--at", "0"], USAGE, says="pick a fork point"),
    Case("fork-at-beyond", ["fork", "done", "--at", "99"], USAGE),
    Case("fork-at-negative", ["fork", "done", "--at", "-1"], USAGE),
    Case("fork-at-not-int", ["fork", "done", "--at", "two"], USAGE),
    Case("fork-new-id-empty", ["fork", "done", "--at", "1", "--new-id", ""], USAGE, says="empty"),
    Case("fork-new-id-taken", ["fork", "done", "--at", "1", "--new-id", "waiting"], USAGE),
    Case("fork-new-id-control-char", ["fork", "done", "--at", "1", "--new-id", "x\x07"], USAGE),
    Case("fork-set-not-pair", ["fork", "done", "--at", "2", "--set", "garbage"], USAGE),
    Case("fork-set-bad-json", ["fork", "done", "--at", "2", "--set", "1=not json"], USAGE),
    Case("fork-set-beyond-at", ["fork", "done", "--at", "1", "--set", "5=1"], USAGE),
    # replay and resume: the journal does not choose the code
    Case("replay-nothing-named", ["replay"], USAGE),
    Case("replay-ids-and-all", ["replay", "done", "--all"], USAGE),
    Case("replay-unknown-id", ["replay", "nope"], USAGE),
    Case("replay-recorded-stdlib-module", ["replay", "planted"], USAGE, setup=_recorded("this:f"),
         says="standard library"),
    Case("replay-recorded-os-system", ["replay", "planted"], USAGE, setup=_recorded("os:system"),
         says="standard library"),
    Case("replay-recorded-journal-module", ["replay", "planted"], USAGE, setup=_recorded("cli:main"),
         says="journal itself"),
    Case("replay-recorded-writable-file", ["replay", "planted"], USAGE, setup=_recorded("{payload}:f"),
         says="other users", after=_payload_not_run),
    Case("replay-recorded-relative-file", ["replay", "planted"], USAGE, setup=_recorded("payload.py:f"),
         says="absolute path", after=_payload_not_run),
    Case("replay-all-with-planted", ["replay", "--all"], USAGE, setup=_recorded("this:f"), says="1 error"),
    Case("replay-handler-missing", ["replay", "done", "--handler", "/nonexistent.py:h"], USAGE),
    Case("replay-handler-sys-exit", ["replay", "exit5", "--handler", f("exits")], USAGE, says="sys.exit(5)",
         setup=lambda tmp, db: _invoke(["run", f("exits"), "--input", "1", "--id", "exit5"], db) and {}),
    Case("resume-unknown-id", ["resume", "nope"], USAGE),
    Case("resume-recorded-stdlib-module", ["resume", "planted"], USAGE, setup=_recorded("this:f"),
         after=_status_is("planted", "pending")),
    Case("resume-recorded-writable-file", ["resume", "planted"], USAGE, setup=_recorded("{payload}:f"),
         after=_payload_not_run),
    Case("resume-handler-missing", ["resume", "waiting", "--handler", "/nonexistent.py:h"], USAGE),
    Case("resume-handler-wrong-arity", ["resume", "waiting", "--handler", f("three_params")], USAGE),
    Case("resume-corrupt-journal", ["resume", "waiting", "--db", "{damaged}"], FAILED, use_db=False,
         setup=lambda tmp, db: _corrupt_copy(tmp, db, "waiting"), says="does not decode",
         after=_status_is("waiting", "diverged", "{damaged}")),
    # trim, compact, check
    Case("trim-bad-age", ["trim", "--older-than", "soon"], USAGE, says="not a duration"),
    Case("trim-unfinished-status", ["trim", "--status", "pending"], USAGE),
    Case("compact-db-is-a-file", ["compact", "--db", "{file}"], USAGE, setup=_file, use_db=False),
    Case("check-corrupt-entry-once", ["check", "--db", "{damaged}"], FAILED, setup=_corrupt_copy, use_db=False,
         after=_once_each),
    Case("check-after-unencodable-step", ["check"], 0,
         setup=lambda tmp, db: _invoke(["run", f("huge_step"), "--input", "1", "--id", "s"], db) and {}),
    Case("check-after-cancelled-sibling", ["check"], 0,
         setup=lambda tmp, db: _invoke(["run", f("sibling_fails"), "--input", "1", "--id", "sib"], db) and {}),
    Case("check-after-unencodable-event", ["check"], 0,
         setup=lambda tmp, db: _invoke(["run", f("unencodable_event"), "--input", "1", "--id", "ev"], db) and {}),
    # worker
    Case("worker-zero-concurrency", ["worker", "--concurrency", "0"], USAGE),
    Case("worker-skips-unloadable", ["worker", "--until-idle"], 0, setup=_unloadable_worker, after=_worker_went_on),
    # no command at all
    Case("unknown-command", ["frobnicate"], USAGE),
]


def _invoke(argv: list[str], db: str | None, *, stdin: str | None = None, env: dict[str, str] | None = None):
    full = list(argv) + (["--db", db] if db is not None else [])
    return CliRunner().invoke(cli, full, input=stdin, env=env, catch_exceptions=False)


@pytest.fixture
def earlier(db, log):
    """The store before the case: one completed and one suspended invocation, as `show --json` has them."""
    assert _invoke(["run", GREET, "--input", '"Ada"', "--id", "done"], db).exit_code == 0
    waiting = _invoke(["run", target("approval"), "--input", json.dumps({"log": log.path, "topic": "t"}),
                       "--id", "waiting"], db)
    assert waiting.exit_code == SUSPENDED
    return {i: json.loads(_invoke(["show", i, "--json"], db).stdout) for i in ("done", "waiting")}


def _substitute(text: str, subs: dict[str, str]) -> str:
    for key, value in subs.items():
        text = text.replace("{" + key + "}", value)
    return text


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_a_clear_exit_code_and_leaves_the_store_sound(case, earlier, db, tmp_path, monkeypatch):
    monkeypatch.delenv("JOURNAL_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    subs = {"db": db, **(case.setup(tmp_path, db) if case.setup else {})}
    argv = [_substitute(a, subs) for a in case.argv]
    env = {k: _substitute(v, subs) for k, v in case.env.items()}
    try:
        result = _invoke(argv, db if case.use_db else None, stdin=case.stdin, env=env or None)
    except SystemExit as exc:  # pragma: no cover - click exits through the runner
        pytest.fail(f"exit {exc.code} escaped the runner")
    output = result.stdout + result.stderr
    assert result.exit_code == case.code, output
    assert "Traceback" not in output and "Error Group" not in output
    if case.code == USAGE:
        assert result.stderr.strip(), "a refusal says why"
    if case.says is not None:
        assert case.says in output, output
    if case.after is not None:
        case.after(result, tmp_path, db)
    # The store the case ran against (or left alone) is sound, and what was there before is intact.
    checked = _invoke(["check"], db)
    assert checked.exit_code == 0, checked.stdout + checked.stderr
    for invocation_id, before in earlier.items():
        now = json.loads(_invoke(["show", invocation_id, "--json"], db).stdout)
        assert now == before


# -- faults a crashed process would show: real processes, so a regression cannot take pytest down ---


@pytest.mark.parametrize("command", [["ls"], ["check"], ["show", "done"], ["run", GREET, "--input", '"b"'],
                                     ["resume", "waiting"], ["replay", "--all"]])
def test_a_truncated_data_file_is_a_clear_error_not_sigbus(command, earlier, sh, db, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(db, damaged)
    _truncate_into_the_data(damaged)
    argv = [sys.executable, "-m", "cli", *command, "--db", str(damaged)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=sh.env, timeout=60)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "is truncated" in done.stderr and str(damaged / "data.mdb") in done.stderr
    assert "Traceback" not in done.stderr
    assert sh("check").returncode == 0


# -- the library: the same faults met through the API ---------------------------------------------


def _library_cases():
    import anyio

    from journal import LmdbStore, Status, UnencodableValue, compact, encode_value, fork
    from journal.errors import JournalError, StoreBusy, StoreError
    from runtime import Engine, TerminalError, load_handler
    from runtime._handler._handlers import load_recorded
    from runtime.errors import HandlerNotFound

    def engine_run(db, handler, value, invocation_id):
        async def main():
            async with Engine.open(db) as engine:
                return await engine.run(handler, value, id=invocation_id)
        return anyio.run(main)

    def store_on_a_file(tmp, db):
        (tmp / "afile").write_text("x")
        with pytest.raises(StoreError, match="not a directory"):
            LmdbStore(tmp / "afile")

    def store_with_symlinked_lock(tmp, db):
        copy = Path(_planted_store_error("lock-symlink")(tmp, db)["damaged"])
        with pytest.raises(StoreError, match="symlink"):
            LmdbStore(copy)
        _victim_intact(None, tmp, db)

    def compact_with_another_store_open(tmp, db):
        with LmdbStore(db) as first, LmdbStore(db) as second:
            with pytest.raises(StoreBusy, match="open 1 more time"):
                compact(first)
            assert second.get("done") is not None

    def handler_of_wrong_arity(tmp, db):
        with pytest.raises(HandlerNotFound, match="at most one input"):
            load_handler(f("three_params"))

    def recorded_stdlib_handler(tmp, db):
        with pytest.raises(HandlerNotFound, match="standard library"):
            load_recorded("this:f")

    def integer_beyond_64_bits(tmp, db):
        with pytest.raises(UnencodableValue, match="int"):
            encode_value(2**70)

    def fork_to_an_empty_id(tmp, db):
        with LmdbStore(db) as store, pytest.raises(JournalError, match="empty"):
            fork(store, "done", at=1, new_id="")

    def handler_calling_sys_exit(tmp, db):
        outcome = engine_run(db, f("exits"), 1, "lib-exit")
        assert outcome.status == Status.FAILED and "sys.exit(5)" in outcome.error.message

    def handler_returning_2_pow_70(tmp, db):
        outcome = engine_run(db, f("huge_result"), 1, "lib-huge")
        assert outcome.status == Status.FAILED and "cannot be journaled" in outcome.error.message

    def resolving_an_unencodable_value(tmp, db):
        async def main():
            async with Engine.open(db) as engine:
                with pytest.raises(TerminalError, match="cannot resolve promise"):
                    await engine.resolve("waiting", "approval", 2**70)
        anyio.run(main)

    def input_for_a_handler_without_one(tmp, db):
        async def main():
            async with Engine.open(db) as engine:
                with pytest.raises(ValueError, match="takes no input"):
                    await engine.start(f("no_input"), 1, id="lib-no-input")
        anyio.run(main)

    return [store_on_a_file, store_with_symlinked_lock, compact_with_another_store_open, handler_of_wrong_arity,
            recorded_stdlib_handler, integer_beyond_64_bits, fork_to_an_empty_id, handler_calling_sys_exit,
            handler_returning_2_pow_70, resolving_an_unencodable_value, input_for_a_handler_without_one]


LIBRARY_CASES = _library_cases()


@pytest.mark.parametrize("fault", LIBRARY_CASES, ids=[c.__name__ for c in LIBRARY_CASES])
def test_library_faults_raise_journal_errors_and_leave_the_store_sound(fault, earlier, db, tmp_path):
    fault(tmp_path, db)
    checked = _invoke(["check"], db)
    assert checked.exit_code == 0, checked.stdout + checked.stderr
    for invocation_id, before in earlier.items():
        assert json.loads(_invoke(["show", invocation_id, "--json"], db).stdout) == before


def test_a_result_too_large_to_journal_fails_the_invocation(earlier, db, tmp_path):
    import anyio

    from journal import LmdbStore, Status, check
    from runtime import Engine

    (tmp_path / "big.py").write_text("async def big(ctx, x):\n    return 'y' * (2 * 1024 * 1024)\n")

    async def main():
        with LmdbStore(db, max_entry_bytes=1024 * 1024) as store:
            async with Engine.open(store=store) as engine:
                outcome = await engine.run(f"{tmp_path / 'big.py'}:big", 1, id="too-large")
            return outcome, check(store)

    outcome, problems = anyio.run(main)
    assert outcome.status == Status.FAILED and "cannot be journaled" in outcome.error.message
    assert problems == []
    for invocation_id, before in earlier.items():
        assert json.loads(_invoke(["show", invocation_id, "--json"], db).stdout) == before


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_full_disk_leaves_the_invocation_pending(durability, sh, tmp_path):
    with small_tmpfs(tmp_path / "small", "2m") as small:
        (tmp_path / "fill.py").write_text(
            "async def fill(ctx, n):\n"
            "    for i in range(1000):\n"
            "        await ctx.run(f's{i}', lambda: 'y' * 100_000)\n")
        store = str(small / "db")
        argv = [sys.executable, "-m", "cli", "run", f"{tmp_path / 'fill.py'}:fill", "--input", "1", "--id", "full",
                "--durability", durability, "--db", store]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=sh.env, timeout=120)
        assert done.returncode == 1 and "is full" in done.stderr and "Traceback" not in done.stderr
        shown = subprocess.run([sys.executable, "-m", "cli", "show", "full", "--json", "--db", store],
                               capture_output=True, text=True, cwd=tmp_path, env=sh.env, timeout=60)
        assert json.loads(shown.stdout)["status"] == "pending"
        checked = subprocess.run([sys.executable, "-m", "cli", "check", "--db", store], capture_output=True,
                                 text=True, cwd=tmp_path, env=sh.env, timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("attempt", range(10))
def test_ctrl_c_stops_an_idle_worker_without_a_traceback(sh, db, tmp_path, attempt):
    worker = sh.popen("worker")
    assert "SIGTERM or Ctrl-C stops it" in worker.stderr.readline()
    if attempt % 2:  # every other time, once it has the store open: inside its loop
        _wait_until_store_mapped(db, worker.pid)
    err = sh.stopped(worker, signal.SIGINT)
    assert worker.returncode == 0, err
    assert "stopped by Ctrl-C" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_a_worker_started_with_sigint_ignored_goes_on_ignoring_it_and_stops_on_sigterm(sh, db, tmp_path):
    worker = sh.popen("worker", sigint=signal.SIG_IGN)  # as `journal worker &` in a script
    assert "SIGTERM stops it (it was started with SIGINT ignored" in worker.stderr.readline()
    worker.send_signal(signal.SIGINT)  # discarded by the kernel, before or after start-up
    _wait_until_store_mapped(db, worker.pid)
    worker.send_signal(signal.SIGINT)
    # Still serving: it runs an invocation started now.
    assert sh("start", target("greet"), "--input", '"ann"', "--id", "g").returncode == 0
    wait_until(lambda: json.loads(sh("show", "g", "--json").stdout)["status"] == "completed",
               "the worker to run the invocation")
    err = sh.stopped(worker, signal.SIGTERM)
    assert worker.returncode == 0, err
    assert "stopped by SIGTERM" in err
    assert "Traceback" not in err


def _wait_until_store_mapped(db: str, pid: int) -> None:
    """Until process `pid` has the store open (it maps data.mdb)."""
    import time

    target = os.path.join(os.path.realpath(db), "data.mdb")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/maps") as maps:
                if any(line.rstrip().endswith(target) for line in maps):
                    return
        except OSError:
            return
        time.sleep(0.01)
