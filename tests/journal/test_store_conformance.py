"""The rules every Store backend must follow: `journal.testing`'s shipped contract, run over
each of journal's own backends (the `backend` fixture), as a third party runs it over theirs."""

import pytest

from journal.testing import StoreContract


@pytest.mark.usefixtures("backend")
class TestEveryBackend(StoreContract):
    def make_store(self, tmp_path, request):
        return request.getfixturevalue("backend").open()
