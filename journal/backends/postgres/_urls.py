"""PostgreSQL store names: telling one from a directory path, and showing one without its
password. The registry asks these of every store name, so they import nothing else."""

from __future__ import annotations


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def redact_url(url: str) -> str:
    """The URL without its password (in the user part or as `password=` in the query), for messages."""
    head, sep, tail = url.rpartition("@")
    if sep and "//" in head:
        scheme, _, userinfo = head.partition("//")
        if ":" in userinfo:
            head = f"{scheme}//{userinfo.split(':', 1)[0]}:***"
        url = f"{head}@{tail}"
    base, sep, query = url.partition("?")
    if sep:
        query = "&".join("password=***" if part.lower().startswith("password=") else part
                         for part in query.split("&"))
        url = f"{base}?{query}"
    return url
