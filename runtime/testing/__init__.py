"""Testing helpers for handlers built on `runtime`: determinism checks and pytest fixtures."""

from ._replay import replay_journal as replay_journal
