# finishline as a container.
#
#   docker build -t finishline .
#   docker run --init -p 8000:8000 -v finishline-data:/data --stop-timeout 40 finishline
#
# or `docker compose up` (docker-compose.yml). Two stages: `build` makes the wheels of
# finishline and its dependencies and installs them into a virtualenv; the runtime stage gets
# that virtualenv on a clean slim base, so no compiler, pip cache or source tree ships. The
# venv is made with `python3 -m venv` and used by absolute path, so the file works on any
# Debian-based Python 3.11+ image whichever directory its interpreter lives in.
#
# Configuration is by environment (`docker run -e`, compose `environment:` / `env_file:`).
# Every server variable, with its default (README.md and .env.example say more):
#
#   storage and service
#     FINISHLINE_STORE_URL=sqlite:////data/finishline.db   (set below: the /data volume);
#                                                redis://HOST:PORT/DB or
#                                                postgresql://USER:PW@HOST:PORT/DB for replicas
#     FINISHLINE_LEASE_S=15.0                    Redis/Postgres: a run's lease; expired: taken over
#     FINISHLINE_MAX_RUN_ATTEMPTS=3              Redis/Postgres: takeovers before "interrupted"
#     FINISHLINE_RETENTION_S=604800.0            Redis/Postgres: how long a terminal run is kept
#     FINISHLINE_PG_SCHEMA=finishline            Postgres store: the schema of its tables
#     FINISHLINE_PG_POOL_SIZE=10                 Postgres store: connections per replica
#     FINISHLINE_API_KEYS=                       comma-separated bearer keys; empty = no auth
#     FINISHLINE_ADMIN_KEYS=                     keys that are also admins (accepted as keys too)
#     FINISHLINE_OIDC_ISSUER=                    OIDC provider whose access tokens are accepted
#     FINISHLINE_OIDC_AUDIENCE=                  the aud tokens must carry (required with it)
#     FINISHLINE_OIDC_OWNER_CLAIM=sub            owner of runs: sub, or a tenant claim (org_id)
#     FINISHLINE_OIDC_ADMIN_CLAIM=               a claim that makes admins, e.g. roles ...
#     FINISHLINE_OIDC_ADMIN_VALUE=               ... when it holds this value
#     FINISHLINE_OIDC_LEEWAY_S=30.0              clock skew allowed on exp, nbf, iat
#     FINISHLINE_OIDC_KEYS_REFRESH_S=60.0        least time between key fetches for unknown kids
#     FINISHLINE_OIDC_KEYS_MAX_AGE_S=3600.0      the issuer's keys are fetched again after this
#     FINISHLINE_MAX_CONCURRENT_RUNS=16          runs executing at once
#     FINISHLINE_MAX_QUEUED_RUNS=100             runs waiting for a slot; past it, 429
#     FINISHLINE_QUOTA_CONCURRENT_RUNS=          per API key: runs queued, running or waiting
#     FINISHLINE_QUOTA_RUNS_PER_MINUTE=          per API key: runs started in any 60 s
#     FINISHLINE_QUOTA_TOKENS_PER_DAY=           per API key: LLM tokens per UTC day
#     FINISHLINE_QUOTA_COST_USD_PER_DAY=         per API key: USD of priced calls per UTC day
#     FINISHLINE_USAGE_METRICS_BY_KEY=false      /metrics by API key too (a series per key)
#     FINISHLINE_SCHEDULES_ENABLED=true          false: schedules record their due times, fire none
#     FINISHLINE_SCHEDULE_MISFIRE_GRACE_S=3600.0 misfire run_once: the latest missed due time, if this recent
#     FINISHLINE_SCHEDULE_POLL_S=1.0             how often the scheduler looks for due schedules
#     FINISHLINE_SHUTDOWN_GRACE_S=30.0           on SIGTERM, how long runs may go on
#     FINISHLINE_SSE_PING_S=15.0                 keep-alive comment interval on SSE
#     FINISHLINE_SSE_SEND_TIMEOUT_S=30.0         a client slower than this to accept a write is dropped
#     FINISHLINE_STREAM_TOKEN_TTL_S=300          lifetime of a run-scoped EventSource token
#     FINISHLINE_TOKEN_SECRET=                   signs stream tokens; required with the Redis store
#     FINISHLINE_MAX_EVENT_CONTENT_CHARS=100000  storage cap on one tool result in the event log
#     FINISHLINE_MAX_REPLY_CHARS=100000          cap on one model reply's text and call arguments
#     FINISHLINE_MAX_WAIT_S=300.0                longest GET /runs/{id}/wait?timeout_s=
#     FINISHLINE_MAX_TASK_CHARS=100000           longest accepted task
#     FINISHLINE_MAX_METADATA_BYTES=16384        largest accepted metadata (JSON)
#     FINISHLINE_MAX_MESSAGE_CHARS=100000        longest steering message
#     FINISHLINE_MAX_PENDING_MESSAGES=100        steering messages a run may hold undelivered
#     FINISHLINE_MAX_BODY_BYTES=1048576          largest request body; past it, 413
#     FINISHLINE_HEADER_TIMEOUT_S=10.0           a request's headers must arrive within it; 408
#     FINISHLINE_BODY_TIMEOUT_S=15.0             a request's whole body must arrive within it; 408
#     FINISHLINE_MAX_BODY_JSON_VALUES=50000      most JSON values in a POST /runs body
#     FINISHLINE_MAX_SYSTEM_PROMPT_CHARS=100000  longest accepted system_prompt
#     FINISHLINE_MAX_MODEL_NAME_CHARS=200        longest accepted model name
#     FINISHLINE_MAX_RUBRIC_CHARS=20000          longest outcome.rubric
#     FINISHLINE_MAX_TOOLS=64                    most tools per run (tools + http_tools)
#     FINISHLINE_MAX_TOOL_SCHEMA_BYTES=16384     largest HTTP tool parameters schema
#     FINISHLINE_MAX_TOOL_SCHEMAS_TOTAL_BYTES=65536  all HTTP tool schemas together
#     FINISHLINE_MAX_SCRIPT_REPLIES=200          most replies in a model_script
#     FINISHLINE_MAX_SCRIPT_REPLY_CHARS=100000   largest scripted reply
#     FINISHLINE_MAX_ANSWER_CHARS=100000         storage cap on a run's answer
#     FINISHLINE_WEBHOOK_ATTEMPTS=5              delivery attempts of a run's webhook
#     FINISHLINE_WEBHOOK_BACKOFF_S=1.0           first delay between attempts; doubles
#     FINISHLINE_WEBHOOK_TIMEOUT_S=10.0          one delivery attempt
#     FINISHLINE_LOG_FORMAT=json                 (set below) auto, json or console
#     FINISHLINE_LOG_LEVEL=INFO                  level of finishline's own loggers
#   models and tools
#     FINISHLINE_LLM_BASE_URL=                   OpenAI-compatible …/v1 URL (or OPENAI_BASE_URL);
#                                                unset with no key: the built-in demo model
#     FINISHLINE_LLM_API_KEY=                    bearer key of that endpoint (or OPENAI_API_KEY)
#     FINISHLINE_LLM_MODEL=gpt-4o-mini           model name sent when a run names none
#     FINISHLINE_LLM_MAX_RESPONSE_BYTES=8388608  most of one LLM response read; more fails
#     FINISHLINE_MODEL_PRICES=                   prices of models by name, over genai-prices':
#                                                JSON or @/path/to/file.json (mount it)
#     FINISHLINE_SCRIPTED_MODEL_ENABLED=true     allow model "scripted" with a model_script
#     FINISHLINE_DEMO_DELAY_S=0.3                pause per demo-model reply
#     FINISHLINE_PROMPTS_FILE=                   TOML file overriding runtime texts (mount it)
#     FINISHLINE_HTTP_TOOL_ALLOW_HOSTS=          hosts HTTP tools and webhooks may call
#     FINISHLINE_HTTP_TOOL_MAX_BYTES=1000000     response size cap of HTTP tools
#     FINISHLINE_HTTP_TOOL_TIMEOUT_S=20.0        default timeout of HTTP tools
#     FINISHLINE_HTTP_TOOL_CONNECTIONS_PER_RUN=8  HTTP tool requests in flight per run
#     FINISHLINE_HTTP_TOOL_CONNECTIONS_PER_KEY=32  ... per API key
#     FINISHLINE_MCP_SERVERS=                    MCP servers: JSON or @/path/to/file.json (mount it)
#     FINISHLINE_MCP_MAX_RESULT_BYTES=1000000    most of one MCP message read; more fails that call
#     FINISHLINE_AGENTS=                         agent profiles: JSON or @/path/to/file.json (mount it)
#     FINISHLINE_A2A_DEFAULT_AGENT=              the profile whose A2A card is at /.well-known/agent-card.json
#     FINISHLINE_A2A_V03=true                    also speak A2A 0.3 (false: a strict 1.0 card, 1.0 only)
#     FINISHLINE_MAX_AGENT_DEPTH=2               how deep sub-agents nest (the root is 0)
#     FINISHLINE_MAX_AGENT_RUNS=20               child runs one tree of runs may start
#     FINISHLINE_APPROVAL_TOOLS=                 registered tools whose calls wait for approval
#   per-run defaults, and the caps a request may not exceed (422 past a cap)
#     FINISHLINE_MAX_STEPS=10                    FINISHLINE_MAX_STEPS_LIMIT=100
#     FINISHLINE_MAX_TIME_S=60.0                 FINISHLINE_MAX_TIME_LIMIT_S=3600.0
#     FINISHLINE_TOOL_TIMEOUT_S=30.0             FINISHLINE_TOOL_TIMEOUT_LIMIT_S=600.0
#     FINISHLINE_LLM_TIMEOUT_S=60.0              FINISHLINE_LLM_TIMEOUT_LIMIT_S=600.0
#     FINISHLINE_FINAL_ANSWER_TIMEOUT_S=15.0     FINISHLINE_FINAL_ANSWER_TIMEOUT_LIMIT_S=120.0
#     FINISHLINE_MAX_NUDGES=3                    FINISHLINE_MAX_NUDGES_LIMIT=20
#     FINISHLINE_LLM_RETRIES=3                   FINISHLINE_LLM_RETRIES_LIMIT=10
#     FINISHLINE_LLM_RETRY_DELAY_S=10.0          FINISHLINE_LLM_RETRY_DELAY_LIMIT_S=120.0
#     FINISHLINE_REPETITION_THRESHOLD=2          FINISHLINE_REPETITION_THRESHOLD_LIMIT=100
#     FINISHLINE_MAX_TOOL_RESULT_CHARS=2000      FINISHLINE_MAX_TOOL_RESULT_CHARS_LIMIT=100000
#     FINISHLINE_MAX_TOTAL_TOKENS=               FINISHLINE_MAX_TOTAL_TOKENS_LIMIT=
#     FINISHLINE_MAX_COST_USD=                   FINISHLINE_MAX_COST_USD_LIMIT=
#     FINISHLINE_MAX_CONTEXT_TOKENS=             FINISHLINE_MAX_CONTEXT_TOKENS_LIMIT=
#     FINISHLINE_STOP_TOOL=true                  FINISHLINE_PROGRESS=false
#     FINISHLINE_FINAL_ANSWER_ON_LIMIT=true      FINISHLINE_STREAM_TOKENS=false
#     FINISHLINE_PROMPT_LANGUAGE=en
#     FINISHLINE_MAX_OUTPUT_RETRIES=2            FINISHLINE_MAX_OUTPUT_RETRIES_LIMIT=10
#     FINISHLINE_MAX_REVISIONS=2                 FINISHLINE_MAX_REVISIONS_LIMIT=10
#     FINISHLINE_PLANNING_INTERVAL=              FINISHLINE_PLANNING_INTERVAL_LIMIT=100
#   traces (OpenTelemetry, off unless an endpoint is set; README "Traces")
#     OTEL_EXPORTER_OTLP_ENDPOINT=               OTLP/HTTP collector, e.g. http://collector:4318
#     OTEL_SERVICE_NAME=finishline               and the other standard OTEL_* variables
#     OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=false   record prompts and replies
#     FINISHLINE_APPROVAL_TIMEOUT_S=3600.0       FINISHLINE_APPROVAL_TIMEOUT_LIMIT_S=86400.0
#   the server process (uvicorn reads these)
#     UVICORN_HOST=0.0.0.0  UVICORN_PORT=8000    where it listens (the healthcheck follows the port)
#     FORWARDED_ALLOW_IPS=*                      proxies whose X-Forwarded-* headers are trusted;
#                                                narrow it to your proxy's address if clients
#                                                can reach the container directly

# The wheelhouse stage is empty: the build stage installs from the package index. An offline
# build (CI) passes `--build-arg WHEELHOUSE=<image holding wheels>` and `PIP_NO_INDEX=1`.
ARG WHEELHOUSE=scratch
FROM ${WHEELHOUSE} AS wheelhouse

FROM python:3.11-slim AS build
ARG PIP_NO_INDEX
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_FIND_LINKS=/wheelhouse
WORKDIR /src
COPY --from=wheelhouse / /wheelhouse/
# Dependencies first, in their own layer: a change to the code alone does not rebuild them.
# They come from the lock (requirements/main.txt, `make lock`): every package pinned, every
# file checked against its hash, nothing resolved here.
COPY requirements/main.txt ./requirements.txt
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --require-hashes --no-deps -r requirements.txt
COPY pyproject.toml README.md ./
COPY app ./app
RUN /opt/venv/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && /opt/venv/bin/pip install --no-cache-dir --no-index --no-deps /wheels/finishline-*.whl \
 && /opt/venv/bin/pip uninstall --yes pip setuptools wheel

FROM python:3.11-slim
LABEL org.opencontainers.image.title="finishline" \
      org.opencontainers.image.description="Run ReAct LLM agents over HTTP, and know when they are done." \
      org.opencontainers.image.licenses="MIT"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    FINISHLINE_STORE_URL=sqlite:////data/finishline.db \
    FINISHLINE_LOG_FORMAT=json \
    UVICORN_HOST=0.0.0.0 \
    UVICORN_PORT=8000 \
    FORWARDED_ALLOW_IPS=*
RUN groupadd --system --gid 10001 finishline \
 && useradd --system --uid 10001 --gid finishline --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin finishline \
 && mkdir -p /data \
 && chown finishline:finishline /data
COPY --from=build /opt/venv /opt/venv
WORKDIR /srv
USER 10001:10001
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["/opt/venv/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('UVICORN_PORT', '8000'), timeout=4)"]
STOPSIGNAL SIGTERM
# SIGTERM drains: runs get FINISHLINE_SHUTDOWN_GRACE_S (30 s) to end, uvicorn waits up to 35 s
# for them; give `docker stop` more than that (compose: stop_grace_period 40s).
# --http: a request's headers get FINISHLINE_HEADER_TIMEOUT_S to arrive (app/api/protocols.py).
CMD ["/opt/venv/bin/uvicorn", "--factory", "app.main:create_app", "--proxy-headers", "--timeout-graceful-shutdown", "35", "--http", "app.api.protocols:HeaderTimeoutProtocol"]
