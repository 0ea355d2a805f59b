"""Prometheus metrics of runs, in a registry of their own (one per app, none global)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.runs.records import RunRecord

_DURATIONS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

MODEL_LABELS = 64
"""Distinct `model` label values at most: requests name models, so past these the rest are
counted as "other" (a metric's cardinality bounded, whatever clients send)."""
OTHER_MODELS = "other"


KEY_LABEL_CHARS = 12
"""A key's label in the per-key metrics: the start of its key id (a digest of the key)."""


def key_label(owner: str | None) -> str:
    """The `key` label of a run's API key: the first characters of its key id (what GET
    /usage shows as `key_id`), or `none` when auth is off."""
    return owner[:KEY_LABEL_CHARS] if owner is not None else "none"


class RunMetrics:
    def __init__(self, registry: CollectorRegistry | None = None, *, per_key: bool = False) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.per_key = per_key
        """Count runs, tokens and USD by API key too (a label per key: opt-in)."""
        r = self.registry
        self.runs = Counter(
            "finishline_runs", "Runs ended, by status and reason.", ["status", "reason"], registry=r
        )
        self.created = Counter("finishline_runs_accepted", "Runs accepted.", registry=r)
        self.duration = Histogram(
            "finishline_run_duration_seconds",
            "Wall time of ended runs.",
            buckets=_DURATIONS,
            registry=r,
        )
        self.steps = Histogram(
            "finishline_run_steps",
            "Steps of ended runs.",
            buckets=(1, 2, 3, 5, 8, 10, 15, 20, 30, 50, 100),
            registry=r,
        )
        self.llm_latency = Histogram(
            "finishline_llm_call_seconds",
            "Latency of LLM calls that returned.",
            buckets=_DURATIONS,
            registry=r,
        )
        self.llm_cost = Counter(
            "finishline_llm_cost_usd",
            "USD spent on LLM calls with a known price, by model (the final calls included).",
            ["model"],
            registry=r,
        )
        self.llm_unpriced = Counter(
            "finishline_llm_unpriced_calls",
            "LLM calls whose model has no known price (their cost is not in the USD counter).",
            ["model"],
            registry=r,
        )
        self._models: set[str] = set()
        self.ends = Counter(  # the termination report's counters (DESIGN §20)
            "finishline_run_ends",
            "Runs ended, by model and stop reason (GET /reports/termination's by_reason).",
            ["model", "reason"],
            registry=r,
        )
        self.degraded = Counter(
            "finishline_runs_degraded", "Runs ended with a degraded answer.", ["model"], registry=r
        )
        self.finish_tool = Counter(
            "finishline_runs_finish_tool",
            "Runs ended through the finish tool (task_finished).",
            ["model"],
            registry=r,
        )
        self.interventions = Counter(
            "finishline_interventions", "Messages injected into runs.", ["kind"], registry=r
        )
        self.retries = Counter("finishline_llm_retries", "LLM call retries.", registry=r)
        self.tool_latency = Histogram(
            "finishline_tool_call_seconds",
            "Latency of tool calls.",
            ["tool"],
            buckets=_DURATIONS,
            registry=r,
        )
        self.tool_timeouts = Counter(
            "finishline_tool_timeouts", "Tool calls that timed out.", ["tool"], registry=r
        )
        self.active = Gauge("finishline_runs_active", "Runs executing now.", registry=r)
        self.queued = Gauge("finishline_runs_queued", "Runs waiting for a slot.", registry=r)
        self.sse_subscribers = Gauge(
            "finishline_sse_subscribers", "Open SSE event streams.", registry=r
        )
        if per_key:  # one series per configured API key (FINISHLINE_USAGE_METRICS_BY_KEY)
            self.key_runs = Counter(
                "finishline_key_runs_accepted", "Runs accepted, by API key.", ["key"], registry=r
            )
            self.key_tokens = Counter(
                "finishline_key_tokens",
                "Tokens of LLM calls, by API key and kind (prompt, completion).",
                ["key", "kind"],
                registry=r,
            )
            self.key_cost = Counter(
                "finishline_key_cost_usd",
                "USD spent on LLM calls with a known price, by API key.",
                ["key"],
                registry=r,
            )

    def run_queued(self, owner: str | None = None) -> None:
        self.created.inc()
        if self.per_key:
            self.key_runs.labels(key_label(owner)).inc()

    def key_spent(
        self, owner: str | None, prompt_tokens: int, completion_tokens: int, cost_usd: float
    ) -> None:
        """An LLM call of a run of `owner`'s key (counted only with `per_key`)."""
        if not self.per_key:
            return
        key = key_label(owner)
        self.key_tokens.labels(key, "prompt").inc(prompt_tokens)
        self.key_tokens.labels(key, "completion").inc(completion_tokens)
        self.key_cost.labels(key).inc(cost_usd)

    def set_load(self, *, running: int, queued: int) -> None:
        self.active.set(running)
        self.queued.set(queued)

    def _model(self, model: str) -> str:
        """The model as a label: the first MODEL_LABELS models seen are themselves."""
        if model not in self._models:
            if len(self._models) >= MODEL_LABELS:
                return OTHER_MODELS
            self._models.add(model)
        return model

    def llm_call(self, duration_ms: int, model: str, cost_usd: float | None) -> None:
        self.llm_latency.observe(duration_ms / 1000)
        model = self._model(model)
        if cost_usd is None:
            self.llm_unpriced.labels(model).inc()
        else:
            self.llm_cost.labels(model).inc(cost_usd)

    def tool_call(self, tool: str, duration_ms: int, *, timed_out: bool) -> None:
        self.tool_latency.labels(tool).observe(duration_ms / 1000)
        if timed_out:
            self.tool_timeouts.labels(tool).inc()

    def run_ended(self, record: RunRecord) -> None:
        reason = record.result.reason.value if record.result else "none"
        self.runs.labels(record.status.value, reason).inc()
        model = self._model(record.model)
        self.ends.labels(model, reason).inc()
        if record.result is not None and record.result.degraded:
            self.degraded.labels(model).inc()
        if reason == "finished":
            self.finish_tool.labels(model).inc()
        self.steps.observe(record.usage.steps)
        if record.started_at is not None and record.ended_at is not None:
            self.duration.observe((record.ended_at - record.started_at).total_seconds())

    def step_recorded(self, type: str, data: dict[str, Any]) -> None:
        """An event of a run: interventions and retries are counted."""
        if type == "intervention":
            self.interventions.labels(str(data.get("kind"))).inc()
        elif type == "llm.retry":
            self.retries.inc()
