"""The container files agree with the service: the factory, the drain on SIGTERM, the data dir.

Building and running the image is ci/container-smoke.sh's job (it needs a Docker engine);
these checks need none.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))


def instruction(name: str) -> list[str]:
    """The arguments of each `name` instruction, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.*)$", text, re.MULTILINE)]


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m)", value)
    assert match, value
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


def test_cmd_serves_the_factory_with_a_graceful_shutdown_longer_than_the_drain() -> None:
    (cmd,) = instruction("CMD")
    argv = json.loads(cmd)  # exec form
    assert argv[0].endswith("/uvicorn")
    assert argv[argv.index("--factory") + 1] == "app.main:create_app"
    assert "--proxy-headers" in argv
    graceful = float(argv[argv.index("--timeout-graceful-shutdown") + 1])
    assert graceful > Settings.model_fields["shutdown_grace_s"].default
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert f"--timeout-graceful-shutdown {int(graceful)}" in makefile
    service = COMPOSE["services"]["finishline"]
    assert seconds(service["stop_grace_period"]) > graceful


def test_runs_as_a_non_root_user_with_the_store_on_the_data_volume() -> None:
    (user,) = instruction("USER")
    assert user.split(":")[0] not in {"0", "root"}
    assert instruction("VOLUME") == ['["/data"]']
    assert "FINISHLINE_STORE_URL=sqlite:////data/finishline.db" in instruction("ENV")[-1]
    service = COMPOSE["services"]["finishline"]
    assert "finishline-data:/data" in service["volumes"]


def test_healthchecks_probe_healthz() -> None:
    (healthcheck,) = instruction("HEALTHCHECK")
    assert "/healthz" in healthcheck
    assert "/healthz" in " ".join(COMPOSE["services"]["finishline"]["healthcheck"]["test"])


def test_compose_reads_an_optional_env_file_and_keeps_redis_behind_a_profile() -> None:
    service = COMPOSE["services"]["finishline"]
    assert service["env_file"] == [{"path": ".env", "required": False}]
    assert service["restart"] == "unless-stopped"
    assert service["init"] is True  # PID 1 must pass on a SIGTERM that beats uvicorn's handlers
    assert "8000:8000" in service["ports"]
    redis = COMPOSE["services"]["redis"]
    assert redis["profiles"] == ["scale"]
    assert "--appendonly" in redis["command"]
    assert "healthcheck" in redis


def test_the_scale_profile_runs_replicas_on_redis_behind_a_proxy() -> None:
    services = COMPOSE["services"]
    replica, proxy = services["replica"], services["proxy"]
    assert replica["profiles"] == proxy["profiles"] == ["scale"]
    assert replica["environment"]["FINISHLINE_STORE_URL"] == "redis://redis:6379/0"
    assert replica["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "ports" not in replica  # scaled: only the proxy publishes a port
    assert proxy["ports"] == ["8080:8080"]
    (mount,) = proxy["volumes"]
    source = mount.split(":")[0]
    conf = (ROOT / source).read_text(encoding="utf-8")
    assert "set $replicas http://replica:8000;" in conf
    assert "proxy_buffering off;" in conf  # SSE passes through as it is written


def test_the_postgres_profile_runs_two_replicas_on_postgres_16_with_a_named_volume() -> None:
    services = COMPOSE["services"]
    replica, proxy, postgres = services["pg-replica"], services["pg-proxy"], services["postgres"]
    assert replica["profiles"] == proxy["profiles"] == postgres["profiles"] == ["postgres"]
    assert replica["deploy"]["replicas"] == 2
    assert replica["environment"]["FINISHLINE_STORE_URL"].startswith("postgresql://finishline:")
    assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert postgres["image"] == "postgres:16"
    assert "postgres-data:/var/lib/postgresql/data" in postgres["volumes"]
    assert "postgres-data" in COMPOSE["volumes"]
    init = (ROOT / "deploy/postgres-init.sql").read_text(encoding="utf-8")
    assert "NOSUPERUSER" in init  # the service connects as a role that is not a superuser
    conf = (ROOT / "deploy/proxy-postgres.conf").read_text(encoding="utf-8")
    assert "set $replicas http://pg-replica:8000;" in conf


def test_production_files_name_no_registry_host() -> None:
    for name in ("Dockerfile", "docker-compose.yml", ".dockerignore"):
        text = (ROOT / name).read_text(encoding="utf-8")
        assert not re.search(r"\b(deb\.debian\.org|pypi\.org|docker\.io|ghcr\.io)\b", text), name
