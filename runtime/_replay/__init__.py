"""Replay: what an invocation's operations decide, with no I/O and no anyio. The `Machine`
claims, suspends, settles; the `Replayer` matches operations with the recorded journal; branch
positions tell each task's place. Imports only `_base` of the runtime's rooms."""
