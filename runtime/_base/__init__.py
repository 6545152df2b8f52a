"""The ground every room stands on: where code runs (the `ContextVar`s
behind `current_context()` and `current_step()`). Imports nothing of the runtime's other rooms."""
