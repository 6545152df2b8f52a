"""A `--db` that is a URL of a kind journal does not know is refused: it is never taken for
a directory path (where `postgress://app@localhost/jobs` would create `./postgress:/app@...`
and run there)."""

from __future__ import annotations

import os

import pytest

from journal import open_store
from journal.errors import StoreError

from .conftest import target

MISSPELT = ["postgress://app:s3cret@localhost/jobs", "sqlite:///tmp/x.db", "POSTGRESQL://app@localhost/jobs",
            "lmdb://./db"]


@pytest.mark.parametrize("url", MISSPELT)
def test_a_store_url_of_an_unknown_scheme_is_an_error_that_creates_nothing(url, sh, tmp_path):
    before = sorted(os.listdir(tmp_path))
    done = sh("run", target("greet"), "--input", '"ada"', "--db", url, use_db=False)
    assert done.returncode == 2, done.stderr
    assert "postgresql://" in done.stderr and "does not know" in done.stderr, done.stderr
    assert "s3cret" not in done.stderr and "Traceback" not in done.stderr
    assert sorted(os.listdir(tmp_path)) == before  # no directory made of the URL


def test_an_unknown_scheme_is_refused_by_reading_and_working_commands_too(sh, tmp_path):
    env_url = "sqlite:///" + str(tmp_path / "x.db")
    for argv in (["ls"], ["worker", "--until-idle"], ["show", "x"]):
        done = sh(*argv, "--db", env_url, use_db=False)
        assert done.returncode == 2 and "does not know" in done.stderr, (argv, done.stderr)
    assert not (tmp_path / "sqlite:").exists() and not (tmp_path / "x.db").exists()


def test_the_library_refuses_it_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match="postgresql://"):
        open_store("postgress://app@localhost/jobs")
    assert os.listdir(tmp_path) == []
