"""An event's time as the wire gives it (`Event.to_dict`, the SSE frames)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime


def wire_ts(ts: float) -> str:
    """An event's time as the wire gives it: ISO 8601, UTC, to the millisecond; the text of
    `datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")`, its second's part
    made once a second (issue #42)."""
    global _second
    fraction, whole = math.modf(ts)
    micros = round(fraction * 1e6)  # as datetime rounds it (half to even), then cut to ms
    if micros >= 1_000_000 or micros < 0 or whole < 0:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    second, text = _second
    if whole != second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        _second = (whole, text)
    return f"{text}.{micros // 1000:03d}+00:00"


_second: tuple[float, str] = (-1.0, "")
