import pytest

from journal import LmdbStore, MemoryStore


@pytest.fixture(params=["memory", "lmdb"])
def store(request, tmp_path):
    """Every conformance test runs against each backend."""
    if request.param == "memory":
        s = MemoryStore()
    else:
        s = LmdbStore(tmp_path / "db")
    yield s
    s.close()
