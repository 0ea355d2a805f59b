"""The app: `create_app()` builds it, its lifespan owns the store, the tools, the models and
the run manager's task group. Served with `uvicorn --factory app.main:create_app`."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import structlog
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app import __version__
from app.api.auth import StreamTokens
from app.api.bodylimit import BodyLimit
from app.api.errors import ErrorBody, install_error_handlers
from app.api.openapi import enforced_openapi
from app.api.routes import (
    a2a,
    agents,
    agui,
    compare,
    events,
    health,
    reports,
    runs,
    schedules,
    threads,
    tools,
    ui,
    usage,
)
from app.api.schedule_runs import schedule_run_reader
from app.assembly import RunAssembly
from app.asynclib import asyncio_thread
from app.engine.prompts import load_prompts
from app.heap import served_heap
from app.identity.bearer import open_authenticator
from app.llm.models import ModelFactory
from app.logs import configure_logging
from app.posting import FetcherPoster
from app.runs.backends import (
    Capacity,
    ReplicaOptions,
    open_backend,
    open_store,
    postgres_store_of,
    redis_store_of,
)
from app.runs.manager import RunManager
from app.runs.metrics import RunMetrics
from app.runs.quotas.seam import QuotaLimits
from app.runs.replicas.cluster import replica_name
from app.runs.schedules.metrics import ScheduleMetrics
from app.runs.schedules.scheduler import SchedulerOptions
from app.runs.schedules.service import Schedules
from app.runs.webhooks import WebhookSender
from app.settings import Settings, get_settings
from app.tools.bounds import ConnectionBounds
from app.tools.fetcher import HttpFetcher
from app.tools.registry import builtin_registry
from app.tracing import start_tracing

log = structlog.get_logger("finishline")

DESCRIPTION = """
Run ReAct LLM agents over HTTP, and know when they are done.

POST a task to `/runs`; follow every thought, tool call and result over SSE at
`/runs/{id}/events`; every run ends with exactly one terminal event and one reason
(finished, answered, max_steps, timeout, token_budget, cost_budget, nudge_limit,
invalid_output, outcome_unmet, cancelled, error). With `output_schema`, a run is done only
when its answer validates against that JSON Schema: `result.output` holds the value. With an
`outcome`, only when a grader judges that its answer meets the rubric.
"""


def drain_on_sigterm(on_term: Callable[[], None]) -> Callable[[], None]:
    """Chain a SIGTERM handler in front of the server's own (uvicorn's), so runs start
    draining the moment the signal arrives; returns the undo. No-op off the main thread or
    when nobody else handles SIGTERM (then there is no server shutdown to join)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous):
        return lambda: None
    loop = asyncio.get_running_loop()

    def handler(signum: int, frame: Any) -> None:
        loop.call_soon_threadsafe(on_term)
        previous(signum, frame)

    signal.signal(signal.SIGTERM, handler)

    def undo() -> None:
        if signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, previous)

    return undo


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    shared = ("redis://", "rediss://", "postgresql://", "postgres://")
    if settings.store_url.startswith(shared) and settings.token_secret is None:
        # replicas must accept each other's stream tokens: a random key per process cannot
        scheme = settings.store_url.partition("://")[0]
        raise ValueError(f"FINISHLINE_TOKEN_SECRET must be set with a {scheme}:// store")
    configure_logging(settings.log_format, settings.log_level)
    prompts = load_prompts(settings.prompts_file)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        mcp = None
        if settings.mcp_servers:  # the MCP SDK is imported only when servers are configured
            from app.tools.mcp.source import McpToolSource

            mcp = McpToolSource(  # first: a server the allow-list refuses stops start-up here
                settings.mcp_servers,
                allow_hosts=settings.http_tool_allow_hosts,
                max_message_bytes=settings.mcp_max_result_bytes,
            )
        registry = builtin_registry(
            http_allow_hosts=settings.http_tool_allow_hosts,
            http_max_bytes=settings.http_tool_max_bytes,
            http_timeout_s=settings.http_tool_timeout_s,
            bounds=ConnectionBounds(
                per_run=settings.http_tool_connections_per_run,
                per_key=settings.http_tool_connections_per_key,
            ),
        )
        if mcp is not None:
            registry.use_mcp(mcp)  # registry.aclose() closes its sessions
        models = ModelFactory(
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
            default_model=settings.llm_model,
            scripted_enabled=settings.scripted_model_enabled,
            demo_delay_s=settings.demo_delay_s,
            max_response_bytes=settings.llm_max_response_bytes,
            prices=settings.model_prices,
        )
        assembly = RunAssembly(settings=settings, registry=registry, models=models, prompts=prompts)
        metrics = RunMetrics(per_key=settings.usage_metrics_by_key)
        replica = replica_name()
        try:  # a bad agent profile stops start-up here, before the store opens
            assembly.check_profiles()
            backend = open_backend(
                open_store(
                    settings.store_url,
                    retention_s=settings.retention_s,
                    pg_schema=settings.pg_schema,
                    pg_pool_size=settings.pg_pool_size,
                ),
                metrics=metrics,
                capacity=Capacity(
                    max_concurrent_runs=settings.max_concurrent_runs,
                    max_queued_runs=settings.max_queued_runs,
                    max_pending_messages=settings.max_pending_messages,
                ),
                replica=ReplicaOptions(
                    replica,
                    lease_s=settings.lease_s,
                    max_attempts=settings.max_run_attempts,
                ),
                quotas=QuotaLimits(
                    concurrent_runs=settings.quota_concurrent_runs,
                    runs_per_minute=settings.quota_runs_per_minute,
                    tokens_per_day=settings.quota_tokens_per_day,
                    cost_usd_per_day=settings.quota_cost_usd_per_day,
                ),
            )
            store = backend.store
            await store.open()
        except BaseException:
            await registry.aclose()
            raise
        webhook_fetcher = (  # a client and pool of their own: tools cannot starve them
            HttpFetcher(registry.http.guard, timeout_s=settings.webhook_timeout_s)
            if registry.http is not None
            else None
        )
        tracing = start_tracing()  # None unless OTEL_EXPORTER_OTLP_ENDPOINT is set
        manager = RunManager(
            backend=backend,
            assembler=assembly,
            metrics=metrics,
            webhooks=WebhookSender(
                store=store,
                poster=FetcherPoster(webhook_fetcher) if webhook_fetcher is not None else None,
                attempts=settings.webhook_attempts,
                backoff_s=settings.webhook_backoff_s,
                timeout_s=settings.webhook_timeout_s,
            ),
            max_event_content_chars=settings.max_event_content_chars,
            max_message_chars=settings.max_message_chars,
            max_answer_chars=settings.max_answer_chars,
            max_argument_chars=settings.max_reply_chars,  # a person's edits, as a model's
            observer=tracing,
            max_agent_depth=settings.max_agent_depth,
            max_agent_runs=settings.max_agent_runs,
        )
        scheduled = Schedules(
            manager=manager,
            read=schedule_run_reader(settings, assembly),
            options=SchedulerOptions(
                name=replica,
                enabled=settings.schedules_enabled,
                lease_s=settings.lease_s,
                # one process: a claim not ours is dead; replicas: it is another's until its lease
                steal=redis_store_of(store) is None and postgres_store_of(store) is None,
                grace_s=settings.schedule_misfire_grace_s,
                poll_s=settings.schedule_poll_s,
            ),
            metrics=ScheduleMetrics(metrics.registry),
        )
        secret = (
            settings.token_secret.get_secret_value().encode() if settings.token_secret else None
        )
        authenticator = open_authenticator(settings)  # PyJWT imported only with an issuer
        a2a_agents = None
        if settings.agents:  # the SDK is imported only by a server that has agents to serve
            from app.api.a2a.server import A2AAgents

            a2a_agents = A2AAgents(
                manager=manager,
                settings=settings,
                assembly=assembly,
            )
        try:
            async with asyncio.TaskGroup() as tasks:
                if mcp is not None:  # sessions open in the background; start-up does not wait
                    mcp.start()
                manager.start(tasks)
                authenticator.start(tasks)  # the issuer's keys load meanwhile: no wait
                interrupted = await manager.recover()
                scheduler = tasks.create_task(scheduled.scheduler.serve(), name="scheduler")
                undo = drain_on_sigterm(lambda: manager.begin_drain(settings.shutdown_grace_s))
                log.info(
                    "service_started",
                    store=settings.store_url.split("://")[0],
                    default_model=models.default_model,
                    auth=authenticator.enabled,
                    oidc=settings.oidc_issuer is not None,
                    interrupted_runs=len(interrupted),
                )
                try:
                    with served_heap(), asyncio_thread():
                        yield {
                            "manager": manager,
                            "settings": settings,
                            "registry": registry,
                            "models": models,
                            "assembly": assembly,
                            "metrics": metrics,
                            "tokens": StreamTokens(secret, ttl_s=settings.stream_token_ttl_s),
                            "authenticator": authenticator,
                            "tracing": tracing,
                            "a2a": a2a_agents,  # A2A endpoints (app.api.a2a), or None
                            "schedules": scheduled,
                        }
                finally:
                    scheduler.cancel()
                    undo()
                    authenticator.stop()
                    await manager.drain(settings.shutdown_grace_s)
        finally:
            await authenticator.aclose()
            await models.aclose()
            await registry.aclose()
            if webhook_fetcher is not None:
                await webhook_fetcher.aclose()
            await store.close()
            if tracing is not None:  # the spans still batched go out, off the event loop
                await asyncio.to_thread(tracing.shutdown)
            log.info("service_stopped")

    app = FastAPI(
        title="finishline",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.openapi = enforced_openapi(app, settings)  # type: ignore[method-assign]
    app.add_middleware(
        BodyLimit, max_bytes=settings.max_body_bytes, read_timeout_s=settings.body_timeout_s
    )
    # every refused input is answered with ErrorBody, never FastAPI's default 422 shape
    invalid: dict[int | str, dict[str, Any]] = {
        422: {"model": ErrorBody, "description": "A field is invalid; the error names it."}
    }
    for module in (
        compare,
        runs,
        threads,
        schedules,
        events,
        tools,
        agents,
        agui,
        a2a,
        usage,
        reports,
    ):
        app.include_router(module.router, responses=invalid)
    for module in (health, ui):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=ui.STATIC), name="static")
    return app
