"""Building the docs site the way `make docs` does (mkdocs.yml, strict mode), into a directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build(site: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of `config` into `site`; its output says what failed."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(config),
            "-d",
            str(site),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=110,
        check=False,
    )
