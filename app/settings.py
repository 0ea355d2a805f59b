"""Server settings: environment variables prefixed FINISHLINE_ (and a .env file).

They set the defaults of every per-run setting and the caps that bound what a request may
ask for (`<setting>_limit`). A request over a cap is refused, never clamped. The per-run ones
are derived from the engine's `Limits`, where each is declared once (docs/settings.md)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import AliasChoices, Field, SecretStr, create_model, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from app.agents import AgentProfile, parse_agents
from app.engine.declarations import declared
from app.engine.policies import Limits
from app.identity.settings import CommaList, IdentitySettings, comma_list
from app.llm.model_prices import ModelPriceIn, parse_model_prices
from app.schedule_settings import ScheduleSettings
from app.store_settings import StoreSettings
from app.tools.mcp.config import McpServerConfig, parse_mcp_servers

RUN_SETTINGS = declared(Limits)
"""Every per-run setting, as the engine declares it (`app.engine.policies.Limits`)."""
CAPS: dict[str, str] = {
    name: item.spec.cap_name(name) for name, item in RUN_SETTINGS.items() if item.spec.capped
}
"""Per-run setting -> the server setting that caps it."""


class ServerSettings(StoreSettings, ScheduleSettings, IdentitySettings):
    """The server's own settings (who may call: `IdentitySettings`; schedules:
    `ScheduleSettings`; the store: `StoreSettings`); `Settings` adds a default and a cap per
    per-run setting."""

    model_config = SettingsConfigDict(
        env_prefix="FINISHLINE_", env_file=".env", extra="ignore", populate_by_name=True
    )

    # -- storage and the service --------------------------------------------------------
    store_url: str = Field(
        "sqlite:///./data/finishline.db",
        description="Where runs and events live: sqlite:///path (WAL, one process), "
        "postgresql://USER:PASSWORD@HOST:PORT/DB or redis://HOST:PORT/DB (several replicas "
        "share either) or memory://.",
    )
    retention_s: float = Field(
        604_800.0,
        ge=0,
        description="Redis and Postgres stores: how long a terminal run and its events are "
        "kept (7 days); 0: for good (Postgres only).",
    )
    lease_s: float = Field(
        15.0,
        gt=0,
        description="Redis and Postgres stores: the executing replica's lease on a run; a "
        "run whose lease expired is taken over by another replica within the lease + 5 s.",
    )
    max_run_attempts: int = Field(
        3,
        ge=1,
        description="Redis and Postgres stores: takeovers of one run before it fails "
        "(interrupted).",
    )
    quota_concurrent_runs: int | None = Field(
        None,
        ge=1,
        description="Quota per API key: its runs queued, running or waiting at once; past "
        "it, POST /runs answers 429 quota_exceeded. Unset: none.",
    )
    quota_runs_per_minute: int | None = Field(
        None,
        ge=1,
        description="Quota per API key: runs admitted in any 60 s (a sliding window). Unset: none.",
    )
    quota_tokens_per_day: int | None = Field(
        None,
        ge=1,
        description="Quota per API key: LLM tokens per UTC day, across its runs; a spent day "
        "refuses new runs and ends running ones (token_budget). Unset: none.",
    )
    quota_cost_usd_per_day: float | None = Field(
        None,
        gt=0,
        description="Quota per API key: USD of priced LLM calls per UTC day, across its "
        "runs; a spent day refuses new runs and ends running ones (cost_budget). Unset: none.",
    )
    usage_metrics_by_key: bool = Field(
        False,
        description="Also count runs, tokens and USD by API key in /metrics (a `key` label "
        "per key: the start of its key id, as GET /usage shows it).",
    )
    max_concurrent_runs: int = Field(16, ge=1, description="Runs executing at once.")
    max_queued_runs: int = Field(
        100, ge=0, description="Runs waiting for a slot; past it, POST /runs answers 429."
    )
    shutdown_grace_s: float = Field(
        30.0,
        ge=0,
        description="On SIGTERM, how long running runs may go on before they are cancelled.",
    )
    sse_ping_s: float = Field(15.0, gt=0, description="Keep-alive comment interval on SSE streams.")
    sse_send_timeout_s: float = Field(
        30.0, gt=0, description="A stream whose client takes longer to accept a write is closed."
    )
    stream_token_ttl_s: int = Field(
        300, ge=1, description="Lifetime of a run-scoped stream token for EventSource."
    )
    token_secret: SecretStr | None = Field(
        None,
        description="Key that signs stream tokens; random per process when unset. Required "
        "with the Redis store, the same on every replica.",
    )
    max_event_content_chars: int = Field(
        100_000, ge=1000, description="Storage cap on a tool result kept in an observation event."
    )
    max_reply_chars: int = Field(
        100_000,
        ge=1000,
        description="Cap on what one model reply brings into a run: its text (cut, saying so) "
        "and each tool call's arguments (longer ones do not run; the model is told). A "
        "person's edited arguments (POST /runs/{id}/approvals) are held to it too (422).",
    )
    max_wait_s: float = Field(
        300.0, gt=0, description="Longest GET /runs/{id}/wait?timeout_s= accepted."
    )
    max_task_chars: int = Field(100_000, ge=1, description="Longest accepted task.")
    max_metadata_bytes: int = Field(16_384, ge=0, description="Largest accepted metadata (JSON).")
    max_message_chars: int = Field(
        100_000, ge=1, description="Longest steering message (POST /runs/{id}/messages)."
    )
    max_pending_messages: int = Field(
        100, ge=1, description="Steering messages a run may hold before its next LLM call."
    )
    # request size caps (docs/limits.md)
    max_body_bytes: int = Field(
        1_048_576,
        ge=1024,
        description="Largest request body in bytes; past it, 413 (checked while it streams in).",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=600,
        description="A request's line and headers must arrive within this (from the "
        "connection's start, or the request's first byte); past it, 408 and the connection "
        "is closed. Needs uvicorn --http app.api.protocols:HeaderTimeoutProtocol.",
    )
    body_timeout_s: float = Field(
        15.0,
        gt=0,
        le=3600,
        description="A request body must arrive whole within this (from the app's first read "
        "of it); past it, 408 and the connection is closed.",
    )
    max_body_json_values: int = Field(
        50_000,
        ge=100,
        description="Most JSON values (commas, arrays and objects) a POST /runs body may hold; "
        "past it, 422.",
    )
    max_system_prompt_chars: int = Field(100_000, ge=1, description="Longest system_prompt.")
    max_rubric_chars: int = Field(20_000, ge=1, description="Longest outcome.rubric.")
    max_model_name_chars: int = Field(200, ge=1, description="Longest accepted model name.")
    max_tools: int = Field(
        64,
        ge=1,
        le=256,
        description="Most tools one run may have: tools, http_tools, client_tools and agents.",
    )
    max_tool_schema_bytes: int = Field(
        16_384,
        ge=2,
        description="Largest parameters schema (JSON) of one request-declared HTTP or client "
        "tool, and largest output_schema.",
    )
    max_tool_schemas_total_bytes: int = Field(
        65_536,
        ge=2,
        description="Largest parameters schemas (JSON) of all request-declared HTTP and client "
        "tools and the output_schema together.",
    )
    max_script_replies: int = Field(
        200, ge=1, le=1000, description="Most replies in a model_script."
    )
    max_script_reply_chars: int = Field(
        100_000, ge=1, description="Largest scripted reply: its content plus its tool calls (JSON)."
    )
    max_answer_chars: int = Field(
        100_000,
        ge=1000,
        description="Storage cap on a run's answer; a longer one is cut, saying so.",
    )
    webhook_attempts: int = Field(5, ge=1, description="Delivery attempts of a run's webhook.")
    webhook_backoff_s: float = Field(
        1.0, ge=0, description="First delay between webhook attempts; doubles each attempt."
    )
    webhook_timeout_s: float = Field(10.0, gt=0, description="One webhook delivery attempt.")
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="auto: console on a TTY, JSON otherwise."
    )
    log_level: str = Field("INFO", description="Log level of finishline's own loggers.")

    # -- models and tools -----------------------------------------------------------------
    llm_base_url: str | None = Field(
        None,
        validation_alias=AliasChoices("FINISHLINE_LLM_BASE_URL", "OPENAI_BASE_URL"),
        description="OpenAI-compatible endpoint (…/v1). Unset and no API key: the demo model.",
    )
    llm_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices("FINISHLINE_LLM_API_KEY", "OPENAI_API_KEY"),
        description="Bearer key for the endpoint (falls back to OPENAI_API_KEY).",
    )
    llm_model: str = Field(
        "gpt-4o-mini", description="Model name sent to the endpoint when a run names none."
    )
    llm_max_response_bytes: int = Field(
        8_388_608,
        ge=65_536,
        description="Most of one LLM response body read; a larger one fails the call "
        "(llm_response_too_large, not retried).",
    )
    model_prices: Annotated[dict[str, ModelPriceIn], NoDecode] = Field(
        default_factory=dict,
        description="Prices of models by the name a run uses, over genai-prices' (JSON, or "
        '@path to a JSON file): {"MODEL": {"input_per_mtok": USD, "output_per_mtok": USD, '
        '"cached_input_per_mtok": USD}} (cached optional). See docs/guides/budgets.md, '
        '"What a run costs".',
    )
    scripted_model_enabled: bool = Field(
        True, description="Allow runs with model 'scripted' and a model_script."
    )
    demo_delay_s: float = Field(0.3, ge=0, description="Pause per demo-model reply.")
    prompts_file: Path | None = Field(
        None, description="TOML file overriding runtime texts: [en] and [zh] tables."
    )
    http_tool_allow_hosts: CommaList = Field(
        default_factory=list,
        description="Hosts http_get, request-declared HTTP tools and webhooks may call: names, "
        "*.suffix, or * (any public host). Private addresses only when listed by name or IP.",
    )
    http_tool_max_bytes: int = Field(
        1_000_000,
        ge=1,
        description="Response size cap of HTTP tools (a longer body is cut) and of a remote "
        "A2A agent's card and answers (a longer one fails the call, unread).",
    )
    http_tool_timeout_s: float = Field(20.0, gt=0, description="Default timeout of HTTP tools.")
    http_tool_connections_per_run: int = Field(
        8, ge=1, description="HTTP tool requests one run may have in flight; more wait their turn."
    )
    http_tool_connections_per_key: int = Field(
        32,
        ge=1,
        description="HTTP tool requests the runs of one API key may have in flight together.",
    )
    mcp_servers: Annotated[dict[str, McpServerConfig], NoDecode] = Field(
        default_factory=dict,
        description="MCP servers whose tools runs may use (JSON, or @path to a JSON file): "
        '{"NAME": {"url": "https://…/mcp", "headers": {…}}} or '
        '{"NAME": {"command": ["prog", "arg"], "env": {…}, "cwd": "…"}}. See docs/guides/tools.md.',
    )
    mcp_max_result_bytes: int = Field(
        1_000_000,
        ge=65_536,
        description="Most of one message an MCP server sends (a tool's result) that is read; "
        "a larger one fails that call alone (an is_error observation), unread.",
    )
    agents: Annotated[dict[str, AgentProfile], NoDecode] = Field(
        default_factory=dict,
        description="Agent profiles runs may name (JSON, or @path to a JSON file): "
        '{"NAME": {"description": "…", "system_prompt": "…", "model": "…", "tools": […], '
        '"settings": {…}, …}}; a request\'s "agent": "NAME" takes one as its defaults. Read '
        "once at start-up; a bad profile stops it. See docs/guides/agents.md.",
    )
    a2a_default_agent: str | None = Field(
        None,
        description="The agent profile also served as the host's A2A agent: its card at "
        "/.well-known/agent-card.json (every profile's is at /a2a/NAME/.well-known/"
        "agent-card.json). Must name a profile of FINISHLINE_AGENTS.",
    )
    a2a_v03: bool = Field(
        True,
        description="Also speak A2A 0.3 at /a2a/NAME (0.3 clients: LangGraph, CrewAI, a2a-sdk "
        "before 1.0): the card names a second interface at 0.3 and carries the 0.3 keys (url, "
        "protocolVersion, preferredTransport). Off: a strict 1.0 card and 1.0 methods only.",
    )
    max_agent_depth: int = Field(
        2,
        ge=0,
        description="How deep sub-agents may nest: the run a request starts is depth 0, its "
        "children 1, theirs 2. Past it, a sub-agent call is an is_error observation (a request "
        "that nests its own agents deeper: 422).",
    )
    max_agent_runs: int = Field(
        20,
        ge=1,
        description="Child runs one tree of runs may start (its root not counted), across "
        "replicas; past it, a sub-agent call is an is_error observation.",
    )
    approval_tools: CommaList = Field(
        default_factory=list,
        description="Registered tools whose every call waits for a person's approval "
        "(POST /runs/{id}/approvals), whatever the request says.",
    )

    @field_validator("http_tool_allow_hosts", "approval_tools", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        return comma_list(value)

    @field_validator("model_prices", mode="before")
    @classmethod
    def _parse_model_prices(cls, value: Any) -> Any:
        return parse_model_prices(value)

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _parse_mcp_servers(cls, value: Any) -> Any:
        return parse_mcp_servers(value)

    @field_validator("agents", mode="before")
    @classmethod
    def _parse_agents(cls, value: Any) -> Any:
        return parse_agents(value)

    def run_defaults(self) -> Limits:
        """Every per-run setting at this server's default."""
        return Limits(**{name: getattr(self, name) for name in RUN_SETTINGS})

    def cap(self, name: str) -> Any:
        """The server's cap on per-run setting `name`; None when it has none."""
        return getattr(self, CAPS[name]) if name in CAPS else None

    @model_validator(mode="after")
    def _default_agent_is_a_profile(self) -> Self:
        name = self.a2a_default_agent
        if name is not None and name not in self.agents:
            profiles = ", ".join(sorted(self.agents)) or "none"
            raise ValueError(
                f"FINISHLINE_A2A_DEFAULT_AGENT={name!r} names no profile of FINISHLINE_AGENTS "
                f"(profiles: {profiles})"
            )
        return self

    @model_validator(mode="after")
    def _defaults_within_caps(self) -> Self:
        for setting, cap in CAPS.items():
            default, limit = getattr(self, setting), getattr(self, cap)
            if limit is None:
                continue
            if default is None:
                if RUN_SETTINGS[setting].spec.null_is_off:
                    continue  # off by default: the cap bounds the values a request asks for
                raise ValueError(
                    f"FINISHLINE_{setting.upper()} must be set when FINISHLINE_{cap.upper()} is"
                )
            if RUN_SETTINGS[setting].spec.zero_is_unbounded and default == 0 and limit > 0:
                raise ValueError(
                    f"FINISHLINE_{setting.upper()}=0 (unbounded) exceeds FINISHLINE_{cap.upper()}"
                )
            if default > limit:
                raise ValueError(
                    f"FINISHLINE_{setting.upper()}={default} exceeds "
                    f"FINISHLINE_{cap.upper()}={limit}"
                )
        return self


def _run_setting_fields() -> dict[str, Any]:
    """Each per-run setting's default, and its cap where it has one."""
    fields: dict[str, Any] = {}
    for name, item in RUN_SETTINGS.items():
        spec, about = item.spec, f"Cap on a request's {item.name}; a request over it gets 422."
        fields[name] = (
            item.type,
            Field(item.default, ge=spec.ge, gt=spec.gt, description=item.description),
        )
        if spec.capped:
            kind = item.type if spec.cap is not None else item.type | None
            fields[spec.cap_name(name)] = (
                kind,
                Field(spec.cap, ge=spec.ge, gt=spec.gt, description=about),
            )
    return fields


if TYPE_CHECKING:
    Settings = ServerSettings
else:
    Settings = create_model(
        "Settings",
        __base__=ServerSettings,
        __doc__=ServerSettings.__doc__,
        __module__=__name__,
        **_run_setting_fields(),
    )
"""The server settings: `ServerSettings`, plus `FINISHLINE_<SETTING>` (the default) and
`FINISHLINE_<SETTING>_LIMIT[_S]` (the cap) for each per-run setting, derived from `Limits`."""


@lru_cache
def get_settings() -> Settings:
    return Settings()
