"""What a handler sees: the `Context` and its `InvocationContext`, steps and the threads they run
on, retries, children, composition, state, memory, the determinism guard, talking, and the
loading of handlers. Imports `_base`, `_replay` and `_flow`, never the engine."""
