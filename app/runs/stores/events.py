"""An event as every store writes it: its data as compact JSON, made at once (the caller may
change `data` after), and the `Event` handed to subscribers made back from that JSON, so a
live event equals its replay (enums as strings, tuples as lists)."""

from __future__ import annotations

import json
from typing import Any

from app.engine.events import EventType
from app.runs.records import Event

_encode = json.JSONEncoder(separators=(",", ":")).encode


def encode(data: dict[str, Any]) -> str:
    """The event's data as stored."""
    return _encode(data)


def stored(run_id: str, seq: int, type: str, ts: float, step: int, payload: str) -> Event:
    """The event as a replay reads it back."""
    return Event(run_id, seq, EventType(type), ts, step, json.loads(payload), payload)
