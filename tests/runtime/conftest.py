import pytest

from runtime import Engine

from ..conftest import store_target

# (async backend, always replay, store). PostgreSQL runs on asyncio only: the store sits
# behind the same thread seam whatever the loop, and the three LMDB modes cover the rest.
MODES = [
    pytest.param(("asyncio", False, "lmdb"), id="asyncio"),
    pytest.param(("trio", False, "lmdb"), id="trio"),
    pytest.param(("asyncio", True, "lmdb"), id="always-replay"),
    pytest.param(("asyncio", False, "postgres"), id="postgres"),
]


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture
def anyio_backend(mode):
    return mode[0]


@pytest.fixture
def db(request, tmp_path, mode):
    """The store the test's engines open: an LMDB directory, or a fresh PostgreSQL database."""
    return store_target(mode[2], request, tmp_path)


@pytest.fixture
def open_engine(db, mode):
    """Open an Engine on a fresh store; every runtime test runs on asyncio, trio and
    always-replay over LMDB, and on asyncio over PostgreSQL."""

    def opener(path=None, **options):
        options.setdefault("always_replay", mode[1])
        return Engine.open(path or db, **options)

    return opener


class Calls:
    """Counts how often each step function really ran (replayed steps must not count)."""

    def __init__(self):
        self.counts = {}

    def __call__(self, name, result=None):
        def fn(*args, **kwargs):
            self.counts[name] = self.counts.get(name, 0) + 1
            return result if result is not None else f"{name}:{args}"

        fn.__name__ = name
        return fn


@pytest.fixture
def calls():
    return Calls()
