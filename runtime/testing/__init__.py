"""Testing helpers for handlers built on `runtime`: determinism checks and pytest fixtures."""
