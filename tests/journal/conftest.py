import pytest


@pytest.fixture
def store(backend):
    """Every storage test that takes `store` runs against each backend (tests/conftest.py)."""
    return backend.open()
