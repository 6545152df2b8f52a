"""Schedules kept in the store (`engine.schedules`): cron or interval ticks, each starting
one invocation `NAME@<tick>`, fired by every worker (DESIGN.md, "Schedules")."""

from ._fire import tick_id as tick_id
from ._schedules import Schedules as Schedules
from ._ticks import next_tick as next_tick

__all__ = ("Schedules", "next_tick", "tick_id")
