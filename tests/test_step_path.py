"""The path of one live step stays short (issue: the hot path written once): the files a
`ctx.run` on LMDB at `sync` durability enters, and no call from storage back into a file up
its stack. `python -m bench.step_path --list` prints the path itself."""

from bench.step_path import trace_one_step


def test_a_live_step_on_lmdb_enters_at_most_eleven_files_and_storage_never_calls_back():
    calls, callbacks = trace_one_step("sync")
    files = sorted({path for path, _ in calls})
    assert len(files) <= 11, files
    assert callbacks == [], callbacks
