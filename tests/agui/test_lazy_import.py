"""The protocol's package is imported by the first POST /ag-ui, not by the app: a server that
never serves AG-UI never loads it (DESIGN §16)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
from app.main import create_app
from app.settings import Settings
create_app(Settings(_env_file=None, store_url="memory://"))
print(sorted(m for m in sys.modules if m == "ag_ui" or m.startswith(("ag_ui.", "app.api.agui"))))
"""


def test_the_app_is_built_without_importing_ag_ui() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
