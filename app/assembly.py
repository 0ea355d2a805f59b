"""The composition root of a run: from a request to what the engine needs.

`RunAssembly` is the runs layer's `RunAssembler`: server-dependent checks at creation (caps,
allow-lists, tool and model names), then the model, tools, limits and prompts at start.
Its `JsonPoster`, for webhooks, is `app.posting.FetcherPoster`. Both sit beside `app.main`, so
the runs layer depends on neither settings, tools nor models. A request's sub-agents are
checked and made tools by `app.subagents`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.agents import VARIABLE as AGENTS_VARIABLE
from app.agents import apply_profile
from app.caps import check_sizes
from app.compiling import checked_output, client_tool_of, compile_schemas, compiled_off_loop
from app.engine.policies import Limits, PromptLanguage
from app.engine.ports import ChatModel, Tool
from app.engine.prompts import TASK_FINISHED, UPDATE_PLAN, Prompts
from app.engine.replycap import CappedModel
from app.llm.models import SCRIPTED, ModelFactory, ModelUnavailableError
from app.offload import off_loop
from app.outcomes import check_outcome_sizes, checked_outcome, outcome_of
from app.runs.errors import InvalidRunError
from app.runs.ports import CheckedRequest, RunInputs
from app.runs.records import RunRecord
from app.runs.spec import ClientToolIn, HttpToolIn, RunRequest, RunSettingsIn
from app.settings import RUN_SETTINGS, Settings
from app.subagents import agent_tools, check_agents, nested_http_tools, remote_agents
from app.tools.base import CompiledSchema, compiled_schema, validation_ready
from app.tools.bounds import bind_http_scope
from app.tools.http import HttpTool
from app.tools.mcp.errors import UnknownServerError
from app.tools.netguard import check_url_allowed
from app.tools.plan import UpdatePlanTool
from app.tools.registry import ToolRegistry, UnknownToolError


class RunAssembly:
    def __init__(
        self,
        *,
        settings: Settings,
        registry: ToolRegistry,
        models: ModelFactory,
        prompts: Mapping[PromptLanguage, Prompts],
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.models = models
        self.prompts = prompts

    # -- at creation ------------------------------------------------------------------------

    async def check(self, request: RunRequest) -> CheckedRequest:
        sized = request.within_caps  # (before a profile makes another request of it)
        if request.agent is not None:
            # a profile's own sizes were checked at start-up, the request's when it was read:
            # only HTTP tools beside the other's tools can add up past a cap, checked below
            request = self.with_profile(request)
        if request.outcome is not None:
            check_outcome_sizes(request, self.settings)
        if sized and not (
            request.http_tools or request.client_tools or request.output_schema or request.agents
        ):
            # nothing in proportion to the request's size is left: no hop to the worker
            # thread, whose one-at-a-time queue every POST /runs would wait in under load
            return self._check(request, [])
        # sizes first, then each HTTP tool's schema (and the output schema) checked and its
        # validator built, in a worker thread: milliseconds a property, 64 KB of schemas
        # would stall the loop
        schemas = await off_loop(self._sized_and_compiled, request)
        return self._check(request, schemas)

    def _sized_and_compiled(self, request: RunRequest) -> list[CompiledSchema]:
        check_sizes(request, self.settings)
        checked_output(request)
        compile_schemas(request.client_tools)  # checked by `_client_tools` (remembered)
        compile_schemas(nested_http_tools(request))  # its sub-agents' (checked with each)
        return compile_schemas(request.http_tools)

    def with_profile(self, request: RunRequest) -> RunRequest:
        """`request` with the values of the agent profile it names as its defaults."""
        profiles = self.settings.agents
        profile = profiles.get(request.agent or "")
        if profile is None:
            available = sorted(profiles)
            raise InvalidRunError(
                "agent",
                f"no agent profile {request.agent!r} on this server; "
                f"profiles: {', '.join(available) or 'none'}",
                unknown=[request.agent],
                available=available,
            )
        return apply_profile(request, profile)

    def check_profiles(self) -> None:
        """Every agent profile against this server: caps, tools, MCP servers, hosts, model.
        At start-up, so that a bad profile stops it: ValueError, one line per problem, each
        naming the profile and the field. MCP tools need only name a configured server (their
        servers connect in the background), and a scripted model no script (its runs bring it)."""
        problems = []
        for name, profile in self.settings.agents.items():
            request = profile.defaults
            try:
                check_sizes(request, self.settings)
                check_outcome_sizes(request, self.settings)
                checked_output(request)
                self._check(request, compile_schemas(request.http_tools), profile=True)
            except InvalidRunError as exc:
                problems.append(f"profile {name!r}: {exc}")
        if problems:
            raise ValueError(f"{AGENTS_VARIABLE}: " + "; ".join(problems))

    def check_nested(
        self, request: RunRequest, *, depth: int, inline: bool, priced: bool, profile: bool
    ) -> CheckedRequest:
        """A sub-agent's child request, checked as a request (`app.subagents`)."""
        check_outcome_sizes(request, self.settings)
        checked_output(request)
        schemas = compile_schemas(request.http_tools)  # remembered: compiled off the loop
        return self._check(
            request, schemas, profile=profile, depth=depth, inline=inline, priced=priced
        )

    def _check(
        self,
        request: RunRequest,
        schemas: list[CompiledSchema],
        *,
        profile: bool = False,
        depth: int = 0,
        inline: bool = True,
        priced: bool = False,
    ) -> CheckedRequest:
        """`profile`: `request` holds an agent profile's values, checked at start-up; `depth`,
        `inline`, `priced`: a sub-agent's, see `app.subagents.check_agents`."""
        server = self.settings  # the sizes were checked first (`app.caps.check_sizes`)
        limits = self.resolve_settings(request.settings)
        limits = checked_outcome(request, limits, self.models, server)
        try:
            self.registry.resolve(request.tools)
        except UnknownToolError as exc:
            if not profile or not all(self._mcp_named(name) for name in exc.unknown):
                raise InvalidRunError(
                    "tools", str(exc), unknown=exc.unknown, available=exc.available
                ) from exc
        if profile:  # a server need only be configured: it connects in the background
            unconfigured = [n for n in request.mcp_servers if n not in server.mcp_servers]
            if unconfigured:
                raise InvalidRunError(
                    "mcp_servers",
                    f"not MCP servers of this server: {', '.join(unconfigured)}",
                    unknown=unconfigured,
                    available=sorted(server.mcp_servers),
                )
        mcp_names = [tool.name for tool in self._mcp_tools(request.mcp_servers, lenient=profile)]
        planning = [UPDATE_PLAN] if limits.planning_interval is not None else []
        taken = {TASK_FINISHED, *request.tools, *mcp_names, *planning}
        for index, tool in enumerate(request.http_tools):
            where = f"http_tools[{index}]"
            if tool.name in taken:
                raise InvalidRunError(
                    f"{where}.name", f"{tool.name!r} is already a tool of this run"
                )
            taken.add(tool.name)
            problem = check_url_allowed(tool.url, server.http_tool_allow_hosts)
            if problem is not None:
                raise InvalidRunError(f"{where}.url", problem)
            tool_cap = server.cap("tool_timeout_s")
            if tool.timeout_s is not None and tool_cap is not None and tool.timeout_s > tool_cap:
                raise InvalidRunError(
                    f"{where}.timeout_s",
                    f"{tool.timeout_s:g} exceeds the server cap of {tool_cap:g}",
                    cap=tool_cap,
                )
            if tool.parameters.get("type", "object") != "object":
                # chat APIs take a function's arguments as one JSON object
                raise InvalidRunError(
                    f"{where}.parameters", "must be a JSON schema of type 'object'"
                )
            try:
                self._http_tool(tool, schemas[index])
            except ValueError as exc:
                raise InvalidRunError(f"{where}.parameters", str(exc)) from exc
        self._client_tools(request.client_tools, taken)
        if request.webhook is not None:
            problem = check_url_allowed(request.webhook, server.http_tool_allow_hosts)
            if problem is not None:
                raise InvalidRunError("webhook", problem)
        elif request.webhook_events is not None:
            raise InvalidRunError("webhook_events", "needs a webhook")
        scripted = request.model_script is not None or (profile and request.model == SCRIPTED)
        try:
            model = self.models.resolve(request.model, has_script=scripted)
        except ModelUnavailableError as exc:
            field_name = "model_script" if "model_script is only" in str(exc) else "model"
            raise InvalidRunError(field_name, str(exc)) from exc
        if limits.max_cost_usd is not None and self.models.price(model) is None:
            raise InvalidRunError(  # a budget that cannot be measured is refused, not ignored
                "settings.max_cost_usd",
                f"model {model!r} has no known price, so a cost budget cannot be measured: "
                "the server can price it with FINISHLINE_MODEL_PRICES",
                model=model,
            )
        names = [*dict.fromkeys([*request.tools, *mcp_names, *planning])]
        names += [t.name for t in request.http_tools]
        if request.approval is not None:  # (client tools wait for their result anyway)
            unknown = sorted(set(request.approval.tools) - set(names))
            if unknown:
                raise InvalidRunError(
                    "approval.tools",
                    f"not tools of this run: {', '.join(unknown)}",
                    unknown=unknown,
                    available=names,
                )
        names += [t.name for t in request.client_tools]
        names += check_agents(
            self,
            request,
            taken,
            model=model,
            depth=depth,
            inline=inline,
            priced=priced or limits.max_cost_usd is not None,
            profile=profile,
        )
        return CheckedRequest(model=model, limits=limits, tool_names=names, request=request)

    def _client_tools(self, tools: Sequence[ClientToolIn], taken: set[str]) -> None:
        """Each client tool named apart from every other tool, with an object schema."""
        for index, tool in enumerate(tools):
            where = f"client_tools[{index}]"
            if tool.name in taken:
                raise InvalidRunError(
                    f"{where}.name", f"{tool.name!r} is already a tool of this run"
                )
            taken.add(tool.name)
            if tool.parameters.get("type", "object") != "object":
                raise InvalidRunError(
                    f"{where}.parameters", "must be a JSON schema of type 'object'"
                )
            try:
                client_tool_of(tool, compiled_schema(tool.parameters))
            except ValueError as exc:
                raise InvalidRunError(f"{where}.parameters", str(exc)) from exc

    def resolve_settings(self, requested: RunSettingsIn) -> Limits:
        """Every per-run setting: the request's value, else the server default; none over a cap."""
        server = self.settings
        explicit = requested.model_fields_set
        chosen: dict[str, Any] = {}
        for name, item in RUN_SETTINGS.items():
            if name not in explicit:
                continue
            value = getattr(requested, name)
            if value is None and not item.nullable:
                raise InvalidRunError(
                    f"settings.{name}", "must not be null; omit it for the default"
                )
            cap = server.cap(name)
            if cap is not None and not (value is None and item.spec.null_is_off):
                unbounded = value is None or (item.spec.zero_is_unbounded and value == 0)
                if unbounded or value > cap:
                    shown = (
                        "null (unbounded)"
                        if value is None
                        else ("0 (no truncation)" if unbounded else f"{value:g}")
                    )
                    raise InvalidRunError(
                        f"settings.{name}",
                        f"{shown} exceeds the server cap of {cap:g}",
                        cap=cap,
                        value=value,
                    )
            chosen[name] = value
        return replace(server.run_defaults(), **chosen)

    # -- at start ---------------------------------------------------------------------------

    async def inputs(self, record: RunRecord) -> RunInputs:
        """What the engine needs to run `record`; called in the run's own task, which it binds
        to the run's per-run and per-key bounds on HTTP tool connections."""
        request = record.request
        await validation_ready()  # jsonschema, for the tools' first calls: not on the loop
        schemas = await compiled_off_loop(request.http_tools)
        bind_http_scope(record.id, record.owner)
        tools: list[Tool] = list(self.registry.resolve(request.tools, stand_ins=True))
        mcp = self._mcp_tools(request.mcp_servers, lenient=True)
        tools += [t for t in mcp if t.name not in request.tools]
        tools += [self._http_tool(t, c) for t, c in zip(request.http_tools, schemas, strict=True)]
        client = await compiled_off_loop(request.client_tools)
        tools += [client_tool_of(t, c) for t, c in zip(request.client_tools, client, strict=True)]
        tools += agent_tools(self, request, remote_agents(request, self.registry.http))
        limits = record.settings
        if limits.planning_interval is not None and all(t.name != UPDATE_PLAN for t in tools):
            tools.append(UpdatePlanTool())  # plan-then-execute plans with it
        script = [entry.model_dump() for entry in request.model_script or ()]
        model = self.models.create(record.model, script, start=record.usage.llm_calls)
        prompts = self.prompts[limits.prompt_language]
        output = None
        if request.output_schema is not None:  # compiled once per run, off the event loop
            output = await off_loop(checked_output, request)

        def capped(chat: ChatModel) -> ChatModel:  # what one reply brings in (engine.replycap)
            return CappedModel(chat, self.settings.max_reply_chars, prompts)

        return RunInputs(
            model=capped(model),
            tools=tools,
            limits=limits,
            prompts=prompts,
            approval=self.approval_tools(request),
            task=request.task,
            system_prompt=record.system_prompt,
            output=output,
            outcome=outcome_of(request, self.models, record.model, capped),
        )

    def _mcp_named(self, name: str) -> bool:
        """Whether `name` is `SERVER__TOOL` of a configured MCP server (listed or not yet)."""
        server, separator, _ = name.partition("__")
        return bool(separator) and server in self.settings.mcp_servers

    def _mcp_tools(self, servers: list[str], *, lenient: bool = False) -> list[Tool]:
        """Every tool of the MCP servers a request enables whole (`mcp_servers`); `lenient`
        (at start) skips a server that has not listed its tools since a restart."""
        if not servers:
            return []
        source = self.registry.mcp
        if source is None and lenient:
            return []
        if source is None:
            raise InvalidRunError("mcp_servers", "this server has no MCP servers configured")
        try:
            return list(source.server_tools(servers, lenient=lenient))
        except UnknownServerError as exc:
            raise InvalidRunError(
                "mcp_servers", str(exc), unknown=exc.unknown, available=exc.available
            ) from exc

    def approval_tools(self, request: RunRequest) -> frozenset[str]:
        """The run's tools that wait for a person: the request's `approval.tools`, its HTTP
        tools marked `requires_approval`, and registered tools the server marks."""
        named = set(request.approval.tools) if request.approval is not None else set()
        named |= {t.name for t in request.http_tools if t.requires_approval}
        named |= set(request.tools) & set(self.settings.approval_tools)
        named |= {t.name for t in request.client_tools}  # each call waits for its result
        return frozenset(named)

    async def check_arguments(
        self, record: RunRecord, tool: str, arguments: dict[str, Any]
    ) -> str | None:
        request = record.request
        await validation_ready()
        for declared_tool in request.http_tools:
            if declared_tool.name == tool:
                (schema,) = await compiled_off_loop([declared_tool])
                return self._http_tool(declared_tool, schema).validate(arguments)
        if tool in request.tools and tool in self.registry:
            (found,) = self.registry.resolve([tool])
            return found.validate(arguments)
        for client_tool in request.client_tools:
            if client_tool.name == tool:
                (schema,) = await compiled_off_loop([client_tool])
                return client_tool_of(client_tool, schema).validate(arguments)
        for mcp_tool in self._mcp_tools(request.mcp_servers, lenient=True):
            if mcp_tool.name == tool:
                return mcp_tool.validate(arguments)
        return f"{tool!r} is not a tool of this run"

    def _http_tool(self, tool: HttpToolIn, schema: CompiledSchema) -> HttpTool:
        """`schema`: the tool's `parameters`, compiled (`compile_schemas`) off the loop."""
        fetcher = self.registry.http
        if fetcher is None:
            raise ValueError("this server's registry has no HTTP fetcher")
        return HttpTool(
            fetcher=fetcher,
            name=tool.name,
            description=tool.description,
            parameters=schema,
            url=tool.url,
            method=tool.method,
            headers=tool.headers,
            timeout_s=tool.timeout_s,
            idempotent=tool.idempotent,
        )
