"""The note `journal run` keeps of what it started from this host (`cli/_started_here.py`)."""

import os

from cli import _started_here

URL = "postgresql://app:secret@db.internal/jobs"


def test_a_noted_invocation_is_found_with_its_handler_and_others_are_not():
    _started_here.note(URL, "inv-1", "/srv/agents.py:run")
    _started_here.note(URL, "inv-2", "agents.triage:run")
    assert _started_here.handler_for(URL, "inv-1") == "/srv/agents.py:run"
    assert _started_here.handler_for(URL, "inv-2") == "agents.triage:run"
    assert _started_here.handler_for(URL, "inv-3") is None
    assert _started_here.handler_for("postgresql://app@db.internal/other", "inv-1") is None


def test_a_note_that_another_user_could_write_is_ignored():
    _started_here.note(URL, "inv-1", "/srv/agents.py:run")
    ledger = _started_here._ledger(URL)
    assert ledger.stat().st_mode & 0o777 == 0o600 and ledger.parent.stat().st_mode & 0o777 == 0o700
    os.chmod(ledger, 0o622)
    assert _started_here.handler_for(URL, "inv-1") is None
    os.chmod(ledger, 0o600)
    os.chmod(ledger.parent, 0o777)
    assert _started_here.handler_for(URL, "inv-1") is None


def test_a_line_cut_short_by_a_crash_is_skipped():
    _started_here.note(URL, "inv-1", "/srv/agents.py:run")
    with open(_started_here._ledger(URL), "a") as f:
        f.write('["inv-2", "/srv/ag')
    assert _started_here.handler_for(URL, "inv-1") == "/srv/agents.py:run"
    assert _started_here.handler_for(URL, "inv-2") is None


def test_the_note_is_never_written_through_a_link_nor_into_a_directory_others_can_write(tmp_path):
    # Another user who can write the notes' directory (a shared XDG_STATE_HOME) puts a link
    # where the note goes: `journal run` must not append to the file it points at.
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    ledger = _started_here._ledger(URL)
    ledger.parent.mkdir(parents=True)
    ledger.symlink_to(victim)
    _started_here.note(URL, "inv-1", "/srv/agents.py:run")
    assert victim.read_text() == "mine\n"
    ledger.unlink()
    os.link(victim, ledger)  # a hard link: the same file under the note's name
    _started_here.note(URL, "inv-1", "/srv/agents.py:run")
    assert victim.read_text() == "mine\n"
    ledger.unlink()
    os.chmod(ledger.parent, 0o777)
    _started_here.note(URL, "inv-1", "/srv/agents.py:run")
    assert not ledger.exists()
