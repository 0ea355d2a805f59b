"""Server settings: environment variables prefixed FINISHLINE_ (and a .env file).

They set the defaults of every per-run setting and the caps that bound what a request may
ask for (`<setting>_limit`). A request over a cap is refused, never clamped.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CommaList = Annotated[list[str], NoDecode]

# per-run setting -> the server setting that caps it
CAPS: dict[str, str] = {
    "max_steps": "max_steps_limit",
    "max_time_s": "max_time_limit_s",
    "tool_timeout_s": "tool_timeout_limit_s",
    "llm_timeout_s": "llm_timeout_limit_s",
    "final_answer_timeout_s": "final_answer_timeout_limit_s",
    "max_nudges": "max_nudges_limit",
    "llm_retries": "llm_retries_limit",
    "llm_retry_delay_s": "llm_retry_delay_limit_s",
    "repetition_threshold": "repetition_threshold_limit",
    "max_tool_result_chars": "max_tool_result_chars_limit",
    "max_total_tokens": "max_total_tokens_limit",
    "max_context_tokens": "max_context_tokens_limit",
}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FINISHLINE_", env_file=".env", extra="ignore", populate_by_name=True
    )

    # -- storage and the service --------------------------------------------------------
    store_url: str = Field(
        "sqlite:///./data/finishline.db",
        description="Where runs and events live: sqlite:///path (WAL, one process), "
        "redis://HOST:PORT/DB or rediss:// (several replicas share it) or memory://.",
    )
    retention_s: float = Field(
        604_800.0,
        gt=0,
        description="Redis store: how long a terminal run and its events are kept (7 days).",
    )
    lease_s: float = Field(
        15.0,
        gt=0,
        description="Redis store: the executing replica's lease on a run; a run whose lease "
        "expired is taken over by another replica within the lease + 5 s.",
    )
    max_run_attempts: int = Field(
        3, ge=1, description="Redis store: takeovers of one run before it fails (interrupted)."
    )
    api_keys: CommaList = Field(
        default_factory=list,
        description="Comma-separated bearer keys; empty = no auth. Each run is visible only "
        "to the key that made it.",
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
    max_wait_s: float = Field(
        300.0, gt=0, description="Longest GET /runs/{id}/wait?timeout_s= accepted."
    )
    max_task_chars: int = Field(100_000, ge=1, description="Longest accepted task.")
    max_metadata_bytes: int = Field(16_384, ge=0, description="Largest accepted metadata (JSON).")
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
        1_000_000, ge=1, description="Response size cap of HTTP tools."
    )
    http_tool_timeout_s: float = Field(20.0, gt=0, description="Default timeout of HTTP tools.")

    # -- per-run defaults (DESIGN §2) and their caps ---------------------------------------
    max_steps: int = Field(10, ge=1)
    max_steps_limit: int = Field(100, ge=1)
    max_time_s: float = Field(60.0, gt=0)
    max_time_limit_s: float = Field(3600.0, gt=0)
    tool_timeout_s: float = Field(30.0, gt=0)
    tool_timeout_limit_s: float = Field(600.0, gt=0)
    llm_timeout_s: float = Field(60.0, gt=0)
    llm_timeout_limit_s: float = Field(600.0, gt=0)
    final_answer_timeout_s: float = Field(15.0, gt=0)
    final_answer_timeout_limit_s: float = Field(120.0, gt=0)
    stop_tool: bool = True
    max_nudges: int = Field(3, ge=0)
    max_nudges_limit: int = Field(20, ge=0)
    llm_retries: int = Field(3, ge=0)
    llm_retries_limit: int = Field(10, ge=0)
    llm_retry_delay_s: float = Field(10.0, ge=0)
    llm_retry_delay_limit_s: float = Field(120.0, ge=0)
    repetition_threshold: int = Field(2, ge=0)
    repetition_threshold_limit: int = Field(100, ge=0)
    max_tool_result_chars: int = Field(2000, ge=0)
    max_tool_result_chars_limit: int = Field(100_000, ge=0)
    progress: bool = False
    max_total_tokens: int | None = Field(None, ge=1)
    max_total_tokens_limit: int | None = Field(None, ge=1)
    max_context_tokens: int | None = Field(None, ge=1)
    max_context_tokens_limit: int | None = Field(None, ge=1)
    final_answer_on_limit: bool = True
    stream_tokens: bool = False
    prompt_language: Literal["en", "zh"] = "en"

    @field_validator("api_keys", "http_tool_allow_hosts", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _defaults_within_caps(self) -> Settings:
        for setting, cap in CAPS.items():
            default, limit = getattr(self, setting), getattr(self, cap)
            if limit is None:
                continue
            if default is None:
                raise ValueError(
                    f"FINISHLINE_{setting.upper()} must be set when FINISHLINE_{cap.upper()} is"
                )
            if setting == "max_tool_result_chars" and default == 0 and limit > 0:
                raise ValueError(
                    "FINISHLINE_MAX_TOOL_RESULT_CHARS=0 (no truncation) exceeds "
                    "FINISHLINE_MAX_TOOL_RESULT_CHARS_LIMIT"
                )
            if default > limit:
                raise ValueError(
                    f"FINISHLINE_{setting.upper()}={default} exceeds "
                    f"FINISHLINE_{cap.upper()}={limit}"
                )
        return self

    @property
    def uses_demo_model(self) -> bool:
        return self.llm_base_url is None and self.llm_api_key is None


@lru_cache
def get_settings() -> Settings:
    return Settings()
