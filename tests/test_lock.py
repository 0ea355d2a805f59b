"""The lock (requirements/*.txt, `make lock`) is in step with pyproject.toml, offline: every
dependency pinned within its range, with hashes, one version of each package across the files.
`make lock-check` (CI) goes further and recompiles the lock to compare."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def pins(name: str) -> dict[str, str]:
    """Package -> pinned version; fails on a pin without a hash."""
    text = (LOCK / name).read_text()
    found: dict[str, str] = {}
    # one entry: the pin line and its `\`-continued --hash lines
    for entry in re.split(r"\n(?=\S)", text):
        match = PIN.match(entry)
        if match is None:
            assert entry.startswith("#") or not entry.strip(), f"{name}: not a pin: {entry!r}"
            continue
        assert "--hash=sha256:" in entry, f"{name}: {match[1]} has no hash"
        found[canonicalize_name(match[1])] = match[2]
    return found


def project() -> dict[str, object]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]  # type: ignore[no-any-return]


def requirements(*extras: str) -> list[Requirement]:
    data = project()
    listed = list(data["dependencies"])  # type: ignore[call-overload]
    for extra in extras:
        listed += data["optional-dependencies"][extra]  # type: ignore[index]
    return [Requirement(line) for line in listed]


@pytest.mark.parametrize(
    ("lock", "extras"), [("main.txt", ()), ("dev.txt", ("dev",)), ("bench.txt", ("dev", "bench"))]
)
def test_every_dependency_is_pinned_within_its_range(lock: str, extras: tuple[str, ...]) -> None:
    pinned = pins(lock)
    for requirement in requirements(*extras):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} is not in requirements/{lock}: run make lock"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"requirements/{lock} pins {name}=={pinned[name]}, outside {requirement}: run make lock"
        )


def test_one_version_of_each_package_across_the_lock_files() -> None:
    main, dev, bench = pins("main.txt"), pins("dev.txt"), pins("bench.txt")
    assert main.items() <= dev.items(), "dev.txt moved a pin of main.txt: run make lock"
    assert dev.items() <= bench.items(), "bench.txt moved a pin of dev.txt: run make lock"


def test_the_build_tools_are_pinned() -> None:
    build = pins("build.txt")
    assert {"pip", "setuptools", "uv"} <= build.keys()
    backend = project_build_requires()
    for requirement in backend:
        assert requirement.specifier.contains(build[canonicalize_name(requirement.name)])


def project_build_requires() -> list[Requirement]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return [Requirement(r) for r in tomllib.load(f)["build-system"]["requires"]]


def test_every_install_takes_the_lock_with_hashes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes --no-deps" in makefile
    for lock in ("build.txt", "dev.txt", "bench.txt"):
        assert f"-r $(LOCK)/{lock}" in makefile
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY requirements/main.txt" in dockerfile
    assert "--require-hashes --no-deps -r requirements.txt" in dockerfile
    assert "make lock-check" in (ROOT / ".ci" / "run").read_text()


def test_langgraph_servers_own_lock_pins_its_inputs_with_hashes() -> None:
    """`make bench` installs LangGraph's server (the service benchmark's peer) into a venv of
    its own from requirements/langgraph-server.txt: langgraph-api pins structlog<26."""
    pinned = pins("langgraph-server.txt")
    listed = [
        Requirement(line)
        for line in (LOCK / "langgraph-server.in").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert listed
    for requirement in listed:
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} is not in langgraph-server.txt: run make lock"
        assert requirement.specifier.contains(pinned[name], prereleases=True)
    assert "-r $(LOCK)/langgraph-server.txt" in (ROOT / "Makefile").read_text()
