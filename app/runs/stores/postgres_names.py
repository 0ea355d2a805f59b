"""`FINISHLINE_PG_SCHEMA`'s check, apart from the Postgres store so that the settings can
check it without importing the driver (a service on another store never loads psycopg)."""

from __future__ import annotations

import re

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_schema_name(name: str) -> str:
    """`FINISHLINE_PG_SCHEMA`, checked: a plain lower-case identifier."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"FINISHLINE_PG_SCHEMA must be a lower-case identifier (a-z, 0-9, _), not {name!r}"
        )
    return name
