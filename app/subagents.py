"""A request's sub-agents (DESIGN §15) against this server, for `app.assembly.RunAssembly`:
checked when the run is created, offered to its model as tools when it starts.

At creation each agent is checked as the child run it would start is (its request made with
a placeholder task, checked by the assembly as any request: caps, tools, hosts, model,
profile), every problem named under `agents.NAME.`: a name taken by another tool of the run,
a host not allowed (`a2a_url`), a model without a price under a cost budget (the tree's
cost could not be measured), agents nested deeper than FINISHLINE_MAX_AGENT_DEPTH. Agents
reached through a profile are not followed past the depth cap (a profile may name itself):
a call past it is refused at run time instead, as the issue's `is_error` observation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from app.caps import check_sizes
from app.engine.delegating import AgentTool, ChildStarter
from app.llm.models import ModelFactory
from app.runs.errors import InvalidRunError
from app.runs.ports import CheckedRequest
from app.runs.spec import HttpToolIn, RunRequest, child_request
from app.settings import Settings
from app.tools.a2a_agent import RemoteAgent
from app.tools.fetcher import HttpFetcher
from app.tools.netguard import check_url_allowed


class RequestChecker(Protocol):
    """What checking a request's agents needs of the assembly (`app.assembly.RunAssembly`)."""

    settings: Settings
    models: ModelFactory

    def with_profile(self, request: RunRequest) -> RunRequest: ...

    def check_nested(
        self, request: RunRequest, *, depth: int, inline: bool, priced: bool, profile: bool
    ) -> CheckedRequest: ...


PLACEHOLDER_TASK = "(a sub-agent's task)"
"""The task a sub-agent's child request is checked with: the model writes the real one."""


@contextmanager
def under(where: str) -> Iterator[None]:
    """An `InvalidRunError` of a child's request, named under the agent's field."""
    try:
        yield
    except InvalidRunError as exc:
        details = {k: v for k, v in exc.details.items() if k != "field"}
        message = exc.message.removeprefix(f"{exc.field}: ")
        raise InvalidRunError(f"{where}.{exc.field}", message, **details) from exc


def check_agents(
    assembly: RequestChecker,
    request: RunRequest,
    taken: set[str],
    *,
    model: str,
    depth: int,
    inline: bool,
    priced: bool,
    profile: bool,
) -> list[str]:
    """Check the request's agents (its model resolved to `model`; `taken`: its other tools'
    names); their names. `depth`: the request's own (the root is 0); `inline`: no profile
    was followed to reach it; `priced`: the tree has a cost budget."""
    server = assembly.settings
    names: list[str] = []
    for name, spec in (request.agents or {}).items():
        where = f"agents.{name}"
        if name in taken:
            raise InvalidRunError(where, f"{name!r} is already a tool of this run")
        taken.add(name)
        names.append(name)
        if spec.a2a_url is not None:
            problem = check_url_allowed(spec.a2a_url, server.http_tool_allow_hosts)
            if problem is not None:
                raise InvalidRunError(f"{where}.a2a_url", problem)
            continue
        if depth + 1 > server.max_agent_depth:
            if not inline:  # reached through a profile: a call is refused when made
                continue
            raise InvalidRunError(
                where,
                f"nests deeper than FINISHLINE_MAX_AGENT_DEPTH={server.max_agent_depth} "
                "(the run a request starts is depth 0)",
                cap=server.max_agent_depth,
            )
        child = child_request(spec, PLACEHOLDER_TASK, model)
        with under(where):
            if child.agent is not None:
                child = assembly.with_profile(child)
            check_sizes(child, server)
            checked = assembly.check_nested(
                child,
                depth=depth + 1,
                inline=inline and spec.agent is None,
                priced=priced,
                profile=profile,
            )
            if priced and assembly.models.price(checked.model) is None:
                raise InvalidRunError(
                    "model",
                    f"model {checked.model!r} has no known price, so the run's cost budget "
                    "(settings.max_cost_usd), which its sub-agents share, cannot be measured",
                    model=checked.model,
                )
    return names


def nested_http_tools(request: RunRequest) -> list[HttpToolIn]:
    """The HTTP tools of the request's agents, theirs included (written in the request)."""
    found: list[HttpToolIn] = []
    agents = list((request.agents or {}).values())
    while agents:
        spec = agents.pop()
        found += spec.http_tools
        agents += spec.agents.values()
    return found


def agent_tools(
    assembly: RequestChecker, request: RunRequest, remote: dict[str, ChildStarter]
) -> list[AgentTool]:
    """The run's agents as tools `NAME(task)`: described by their own description, else their
    profile's; `remote`: the starters of the remote A2A agents, by name."""
    tools = []
    for name, spec in (request.agents or {}).items():
        description = spec.description
        if description is None and spec.agent is not None:
            found = assembly.settings.agents.get(spec.agent)
            description = found.description if found is not None else spec.agent
        tools.append(AgentTool(name, description or name, remote.get(name)))
    return tools


def remote_agents(request: RunRequest, fetcher: HttpFetcher | None) -> dict[str, ChildStarter]:
    """The run's remote A2A agents, by name, called through the tools' network guard."""
    remote = {name: a.a2a_url for name, a in (request.agents or {}).items() if a.a2a_url}
    if not remote or fetcher is None:
        return {}
    return {
        name: RemoteAgent(url, fetcher.guard, max_bytes=fetcher.max_bytes)
        for name, url in remote.items()
    }
