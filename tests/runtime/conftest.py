import pytest

from runtime import Engine

MODES = [
    pytest.param(("asyncio", False), id="asyncio"),
    pytest.param(("trio", False), id="trio"),
    pytest.param(("asyncio", True), id="always-replay"),
]


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture
def anyio_backend(mode):
    return mode[0]


@pytest.fixture
def open_engine(tmp_path, mode):
    """Open an Engine on a fresh LMDB store; every runtime test runs on asyncio, trio and always-replay."""

    def opener(path=None, **options):
        options.setdefault("always_replay", mode[1])
        return Engine.open(path or tmp_path / "db", **options)

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
