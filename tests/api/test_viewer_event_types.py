"""The viewer's JS knows exactly the service's event types (`EventType`): it listens for each
on the EventSource, knows which end a run, and renders each one."""

from __future__ import annotations

import json
import re
from pathlib import Path

from app.engine.events import TERMINAL_EVENT_TYPES, EventType
from app.engine.policies import InterventionKind

STATIC = Path(__file__).resolve().parents[2] / "app" / "api" / "static"


def js_strings(text: str) -> list[str]:
    return [json.loads(s) for s in re.findall(r'"[^"\\]*"', text)]


def js_block(path: Path, opening: str, closing: str) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index(opening) + len(opening)
    return text[start : text.index(closing, start)]


def object_keys(body: str) -> set[str]:
    """Top-level keys of a JS object literal: `"a.b"(event) {`, `name(event) {`, `"a": …`."""
    keys = re.findall(r'^  (?:"([^"]+)"|([a-z_]+))(?:\(event\)|:)', body, flags=re.M)
    return {quoted or bare for quoted, bare in keys}


def test_the_stream_listens_for_exactly_the_event_types_in_order() -> None:
    listed = js_strings(js_block(STATIC / "stream.js", "export const EVENT_TYPES = [", "];"))
    assert listed == [t.value for t in EventType]


def test_the_stream_knows_exactly_the_terminal_types() -> None:
    terminal = js_strings(
        js_block(STATIC / "stream.js", "export const TERMINAL = new Set([", "]);")
    )
    assert set(terminal) == {t.value for t in TERMINAL_EVENT_TYPES}


def test_the_timeline_renders_every_event_type_and_no_other() -> None:
    timeline = STATIC / "timeline.js"
    renderers = object_keys(js_block(timeline, "const RENDERERS = {", "\n};"))
    endings = object_keys(js_block(timeline, "const ENDINGS = {", "\n};"))
    assert endings == {t.value for t in TERMINAL_EVENT_TYPES}
    assert renderers | endings == {t.value for t in EventType}


def test_the_timeline_labels_every_intervention_kind_and_no_other() -> None:
    kinds = object_keys(js_block(STATIC / "timeline.js", "const INTERVENTIONS = {", "\n};"))
    assert kinds == {k.value for k in InterventionKind}
