"""Liveness, readiness and Prometheus metrics; open without an API key (no run content)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.deps import ManagerDep, MetricsDep
from app.api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
async def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Health,
    summary="Readiness: the store answers and the server takes runs",
    responses={503: {"model": Health}},
)
async def readyz(request: Request, manager: ManagerDep) -> Response:
    if manager.draining:
        return JSONResponse({"status": "draining", "detail": "shutting down"}, status_code=503)
    try:
        await manager.store.ping()
    except Exception as exc:
        return JSONResponse({"status": "unavailable", "detail": f"store: {exc}"}, status_code=503)
    return JSONResponse({"status": "ready", "detail": None})


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
)
async def metrics(metrics: MetricsDep) -> Response:
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
