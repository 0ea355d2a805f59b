"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.kit import sqlite_url


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store the service ships with: tests taking this run once on each."""
    if request.param == "memory":
        return "memory://"
    return sqlite_url(tmp_path)
