"""The PostgreSQL URLs the docs tell users to give `--db` and `JOURNAL_DB` are ones journal
takes, and the multi-host forms, aimed at real servers, reach the primary past a standby
and a host that is down."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.pgserver import free_port

from .conftest import target

DOCS = Path(__file__).resolve().parents[2] / "docs"
# A URL given to journal in a console example: after JOURNAL_DB= or --db, quoted or not.
_GIVEN = re.compile(r"(?:JOURNAL_DB=|--db[ =])'?(postgresql://[^\s'\"`]+)")


def documented_urls() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for url in _GIVEN.findall(page.read_text(encoding="utf-8")):
            if "..." not in url:  # `--db postgresql://...` in prose: a placeholder, not an example
                found.append((page.name, url))
    return list(dict.fromkeys(found))  # (page, url) once each


def _hosts(url: str) -> list[str]:
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(url).get("host", "")).split(",")


def test_the_docs_give_multi_host_urls_in_both_forms():
    multi = [url for _, url in documented_urls() if len(_hosts(url)) > 1]
    assert any("?host=" in url or "&host=" in url for url in multi), multi  # ?host=h1,h2&port=p1,p2
    assert any(re.search(r"@[^/?]+,[^/?]+/", url) for url in multi), multi  # h1:p1,h2:p2


@pytest.mark.parametrize(("page", "url"), documented_urls(), ids=[f"{p}:{u}" for p, u in documented_urls()])
def test_every_documented_url_is_one_journal_takes(page, url):
    from psycopg.conninfo import conninfo_to_dict

    from journal.backends.postgres._connect import conninfo

    settings = conninfo_to_dict(conninfo(url, "writer"))  # what each of the store's sessions is given
    assert settings.get("dbname"), f"{page}: {url} names no database"
    if len(_hosts(url)) > 1:
        ports = str(settings.get("port", "")).split(",")
        assert len(ports) in (1, len(_hosts(url))), f"{page}: {url} lists {len(ports)} ports for its hosts"
        assert settings["target_session_attrs"] == "read-write", f"{page}: {url}"


def _aimed(url: str, database: str, ports: list[int]) -> str:
    """`url` as written in the docs, its hosts db1, db2, ... replaced by 127.0.0.1 on
    `ports` (in the form the docs wrote), its user by the test servers' and its database
    by `database`."""
    hosts = _hosts(url)
    assert hosts == [f"db{i}" for i in range(1, len(hosts) + 1)], (
        f"{url}: a multi-host example in the docs names its hosts db1, db2, ... so that this test can aim it")
    assert len(hosts) == len(ports), f"{url}: {len(hosts)} hosts, the test has {len(ports)} servers for them"
    base, _, query = url.partition("?")
    if "host=" in query:  # ?host=db1,db2&port=5432,5432
        params = [p for p in query.split("&") if not p.startswith(("host=", "port="))]
        query = "&".join([f"host={','.join(['127.0.0.1'] * len(ports))}", f"port={','.join(map(str, ports))}",
                          *params])
    else:  # db1:5432,db2:5432 (or db1,db2) before the database
        base = re.sub(r"\bdb(\d+)(?::\d+)?", lambda m: f"127.0.0.1:{ports[int(m.group(1)) - 1]}", base)
    base = base.replace("journal_app@", "journal@").replace("/jobs", f"/{database}")
    aimed = f"{base}?{query}" if query else base
    assert _hosts(aimed) == ["127.0.0.1"] * len(ports), f"could not aim {url} at the test's servers: {aimed}"
    return aimed


def _journal(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=timeout)


def test_the_documented_multi_host_urls_reach_the_primary_past_a_standby_and_a_dead_host(servers):
    primary = servers(listen="127.0.0.1")
    standby = servers.standby_of(primary, listen="127.0.0.1")
    name = primary.create_database()
    multi = [url for _, url in documented_urls() if len(_hosts(url)) > 1]
    assert multi, "no multi-host URL in the docs"
    for n, url in enumerate(dict.fromkeys(multi)):
        # Listed first: a standby (which takes no writes), then hosts where nothing listens,
        # the primary last.
        hosts = len(_hosts(url))
        aimed = _aimed(url, name, [standby.port] + [free_port() for _ in range(hosts - 2)] + [primary.port])
        started = _journal("start", "greet", "--input", json.dumps(f"doc {n}"), "--id", f"doc-{n}", "--db", aimed)
        assert started.returncode == 0, f"{url}:\n{started.stderr}"
        worked = _journal("worker", "--until-idle", "--handler", f"greet={target('greet')}", "-q", "--db", aimed)
        assert worked.returncode == 0, f"{url}:\n{worked.stderr}"
        assert "Traceback" not in worked.stderr, worked.stderr
        shown = _journal("show", f"doc-{n}", "--json", "--db", primary.url(name))  # read on the primary itself
        assert shown.returncode == 0, shown.stderr
        record = json.loads(shown.stdout)
        assert record["status"] == "completed" and record["result"] == f"hello doc {n}", record
