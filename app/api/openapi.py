"""The OpenAPI document declares what this server enforces: the static schema of the
request models, plus this server's caps (settings) as maximums, its agent profiles as the
names `agent` takes, and links from a created run to the operations on it (for clients and
stateful fuzzers). What no schema can state (a
combined count, metadata bytes, an allow-list, a registered name) is still checked at
runtime and refused with a 422 naming the field (docs/limits.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic.json_schema import models_json_schema

from app.api.openapi_agui import agui_input
from app.api.schemas import RunCreate
from app.runs.jsonsafe import INT64_MAX, INT64_MIN
from app.runs.records import RunStatus
from app.settings import CAPS, Settings

RUN_ID = {"run_id": "$response.body#/id"}
LINKS = {
    "GetRun": "get_run_runs__run_id__get",
    "WaitRun": "wait_run_runs__run_id__wait_get",
    "FollowEvents": "follow_events_runs__run_id__events_get",
    "CancelRun": "cancel_run_runs__run_id__cancel_post",
    "GetStreamToken": "stream_token_runs__run_id__stream_token_post",
    "DeleteRun": "delete_run_runs__run_id__delete",
}


def _bound(prop: dict[str, Any], kind: str, key: str, value: Any) -> None:
    """Set `key` on the branch of `prop` of JSON type `kind` (itself, or in its anyOf)."""
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") == kind or (kind == "number" and branch.get("type") == "integer"):
            branch[key] = value


def _without_null(parameter: dict[str, Any]) -> None:
    """An optional query or header parameter is null by being absent: FastAPI's `anyOf`
    with a `null` branch read as "the text `null` is valid" to schema-driven clients and
    fuzzers (`Last-Event-ID: null`, refused with a 422), so the schema says what the
    server takes, the branch that is not null."""
    schema = parameter.get("schema", {})
    branches = [b for b in schema.get("anyOf", []) if b.get("type") != "null"]
    if parameter.get("in") == "path" or len(branches) == len(schema.get("anyOf", [])):
        return
    del schema["anyOf"]
    if len(branches) == 1:
        schema.update(branches[0])
    else:
        schema["anyOf"] = branches


def _request_models(components: dict[str, Any]) -> None:
    """POST /runs reads its body itself (app.api.runbody): add the models it declares."""
    _, definitions = models_json_schema(
        [(RunCreate, "validation")], ref_template="#/components/schemas/{model}"
    )
    for name, definition in definitions.get("$defs", {}).items():
        components.setdefault(name, definition)


JSON_VALUE = "JsonValue"
FREE_FORM = (
    ("DecisionIn", "arguments"),
    ("RunCreate", "metadata"),
    ("ScriptedToolCallIn", "arguments"),
)
"""The request fields that hold data of the client's own: any JSON this server can keep."""


def _json_values(components: dict[str, Any]) -> None:
    """Data a request holds as it is (an approval's `arguments`, a run's `metadata`, a
    scripted call's arguments) is any JSON value this server can store and read back
    (`app.runs.jsonsafe`): declared as such, integers within 64 bits, so a client or fuzzer
    that follows the document sends none the server refuses. (A number written with a
    fraction or an exponent, `1e30`, is a float to the server and taken; JSON Schema counts
    one with no fractional part as an integer, so the document is the stricter there.)"""
    ref = {"$ref": f"#/components/schemas/{JSON_VALUE}"}
    components[JSON_VALUE] = {
        "description": "Any JSON value, as this server stores it: integers within 64 bits "
        "(past them, 422 naming the value's path), finite numbers, text.",
        "anyOf": [
            {"type": "object", "additionalProperties": ref},
            {"type": "array", "items": ref},
            {"type": "string"},
            {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX},
            {"type": "number", "not": {"type": "integer"}},
            {"type": "boolean"},
            {"type": "null"},
        ],
    }
    for model, name in FREE_FORM:
        prop = components.get(model, {}).get("properties", {}).get(name)
        if prop is not None:
            _bound(prop, "object", "additionalProperties", ref)


def declare_caps(schema: dict[str, Any], settings: Settings) -> dict[str, Any]:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    _request_models(components)
    run = components.get("RunCreate", {}).get("properties", {})
    for name, cap in (
        ("task", settings.max_task_chars),
        ("system_prompt", settings.max_system_prompt_chars),
        ("model", settings.max_model_name_chars),
    ):
        if name in run:
            _bound(run[name], "string", "maxLength", cap)
    for name, cap in (
        ("tools", settings.max_tools),
        ("http_tools", settings.max_tools),
        ("model_script", settings.max_script_replies),
    ):
        if name in run:
            _bound(run[name], "array", "maxItems", cap)
    if "agent" in run:  # the profiles are this server's, fixed at start-up: name them
        names = sorted(settings.agents)
        if names:
            _bound(run["agent"], "string", "enum", names)
        else:
            run["agent"]["anyOf"] = [b for b in run["agent"]["anyOf"] if b["type"] != "string"]
    per_run = components.get("RunSettingsIn", {}).get("properties", {})
    for name, cap_name in CAPS.items():
        cap = getattr(settings, cap_name)
        if cap is not None and name in per_run:
            _bound(per_run[name], "number", "maximum", cap)
    tool = components.get("HttpToolIn", {}).get("properties", {})
    if "timeout_s" in tool:
        _bound(tool["timeout_s"], "number", "maximum", settings.cap("tool_timeout_s"))
    for parameter in (
        schema["paths"].get("/runs/{run_id}/wait", {}).get("get", {}).get("parameters", [])
    ):
        if parameter["name"] == "timeout_s":
            _bound(parameter["schema"], "number", "maximum", settings.max_wait_s)
    for parameter in (
        schema["paths"].get("/runs/{run_id}/events", {}).get("get", {}).get("parameters", [])
    ):
        pattern = parameter["schema"].pop("pattern", None)
        if pattern is not None:  # on the string branch, where it applies
            _bound(parameter["schema"], "string", "pattern", pattern)
    _json_values(components)
    agui_input(schema, components)
    _declare_auth(schema, settings)
    too_large = {
        "description": "The body exceeds FINISHLINE_MAX_BODY_BYTES.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    }
    for operations in schema["paths"].values():
        for operation in operations.values():
            if "requestBody" in operation:
                operation["responses"].setdefault("413", too_large)
    statuses = "(" + "|".join(s.value for s in RunStatus) + ")"
    for parameter in schema["paths"].get("/runs", {}).get("get", {}).get("parameters", []):
        if parameter["name"] == "status":  # the route names a wrong one in its 422 itself
            for branch in parameter["schema"].get("anyOf", []):
                if branch.get("type") == "array":
                    branch["items"]["pattern"] = rf"^ *{statuses}( *, *{statuses})* *$"
    for operations in schema["paths"].values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                _without_null(parameter)
    created = schema["paths"].get("/runs", {}).get("post", {}).get("responses", {})
    for status in ("202",):  # the 200 may be an SSE stream: no JSON body to link from
        if status in created:
            created[status]["links"] = {
                name: {"operationId": operation, "parameters": RUN_ID}
                for name, operation in LINKS.items()
            }
    return schema


BEARER_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "An API key of this server, or (with an OIDC issuer set) an access token "
    "of its identity provider: a JWT signed RS256 or ES256. See docs/guides/security.md.",
}
AUTH_RESPONSES: dict[str, dict[str, Any]] = {
    "401": {
        "description": "No credential, or one refused: an unknown API key, or a token "
        "refused (`invalid_token`; `WWW-Authenticate` and `details.problem` name what failed)."
    },
    "403": {
        "description": "`insufficient_scope`: the token carries finishline: scopes, not "
        "the one this request needs (finishline:read or finishline:write)."
    },
    "503": {
        "description": "`identity_provider_unavailable`: a token cannot be checked until "
        "the identity provider's keys are loaded (API keys still work); Retry-After."
    },
}


def _declare_auth(schema: dict[str, Any], settings: Settings) -> None:
    """The bearer scheme as a security scheme, not as a header parameter (OpenAPI ignores
    those named Authorization): required on every operation that authenticates when this
    server has auth on; what a refused credential gets (403 and 503 come from tokens)."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    answers = dict(AUTH_RESPONSES) if settings.oidc_issuer else {"401": AUTH_RESPONSES["401"]}
    for operations in schema["paths"].values():
        for operation in operations.values():
            parameters = operation.get("parameters", [])
            kept = [p for p in parameters if p.get("name", "").lower() != "authorization"]
            if len(kept) == len(parameters):
                continue
            if kept:
                operation["parameters"] = kept
            else:
                del operation["parameters"]
            for status, response in answers.items():
                answer = operation["responses"].setdefault(status, {"content": error})
                answer["description"] = response["description"]
            if settings.auth_enabled:
                operation["security"] = [{"bearer": []}]
    if settings.auth_enabled:
        schema["components"].setdefault("securitySchemes", {})["bearer"] = BEARER_SCHEME


def enforced_openapi(app: FastAPI, settings: Settings) -> Callable[[], dict[str, Any]]:
    """A replacement for `app.openapi` that adds this server's caps and links once."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = declare_caps(build(), settings)
        return app.openapi_schema

    return openapi
