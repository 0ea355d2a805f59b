"""The OpenAPI document declares what this server enforces: the static schema of the
request models, plus this server's caps (settings) as maximums, its agent profiles as the
names `agent` takes, and links from a created run to the operations on it (for clients and
stateful fuzzers). What no schema can state (a
combined count, metadata bytes, an allow-list, a registered name) is still checked at
runtime and refused with a 422 naming the field (docs/limits.md)."""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic.json_schema import models_json_schema

from app.api.schemas import RunCreate
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


AGUI_PREFIX = "AgUi."
AGUI_NOT_IN_PROPS = ("task", "stream", "previous_run_id")


def _agui_input(schema: dict[str, Any], components: dict[str, Any]) -> None:
    """POST /ag-ui reads its body itself too: declare AG-UI's `RunAgentInput`, from the
    protocol's own model (imported now, when the document is first asked for), with what this
    server adds: the id lengths, the names a frontend tool may have, and the fields
    `forwardedProps.finishline` takes (POST /runs's, but task, stream and previous_run_id)."""
    operation = schema["paths"].get("/ag-ui", {}).get("post")
    if operation is None:
        return
    from ag_ui._generated import models
    from ag_ui.core import RunAgentInput

    from app.runs.spec import ClientToolIn

    ref = "#/components/schemas/" + AGUI_PREFIX + "{model}"
    declared = RunAgentInput.model_json_schema(by_alias=True, ref_template=ref)
    defs = declared.pop("$defs", {})
    for name, definition in {**defs, "RunAgentInput": declared}.items():
        _describe(definition, getattr(models, name, None))
        components[AGUI_PREFIX + name] = definition
    for tagged in _discriminators([declared, *defs.values()]):  # the model needs each tag
        for target in tagged["mapping"].values():
            required = components[target.rsplit("/", 1)[1]].setdefault("required", [])
            if tagged["propertyName"] not in required:
                required.append(tagged["propertyName"])
    for name in ("threadId", "runId"):
        declared["properties"][name].update(minLength=1, maxLength=256)
    tool = components[AGUI_PREFIX + "Tool"]["properties"]
    client_tool = ClientToolIn.model_json_schema()["properties"]
    tool["name"]["pattern"] = client_tool["name"]["pattern"]
    tool["description"]["maxLength"] = client_tool["description"]["maxLength"]
    config = {**components["RunCreate"], "title": "AgUiRunConfig"}
    config["properties"] = {
        k: v for k, v in config["properties"].items() if k not in AGUI_NOT_IN_PROPS
    }
    config.pop("required", None)
    config.pop("examples", None)
    config["description"] = "POST /runs's fields but task, stream and previous_run_id."
    components[AGUI_PREFIX + "RunConfig"] = config
    declared["properties"]["forwardedProps"] = {
        "anyOf": [
            {
                "type": "object",
                "properties": {"finishline": {"$ref": ref.format(model="RunConfig")}},
            },
            {"type": "null"},
        ],
        "description": "Passed through by the client; finishline reads `finishline`.",
    }
    components[AGUI_PREFIX + "RunAgentInput"] = declared
    body = {"$ref": ref.format(model="RunAgentInput")}
    operation["requestBody"]["content"]["application/json"]["schema"] = body


@functools.cache
def _field_docs(module: Any) -> dict[str, dict[str, str]]:
    """Per class of `module`, the docstring under each field (parsed once)."""
    found: dict[str, dict[str, str]] = {}
    for node in ast.parse(inspect.getsource(module)).body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs = found[node.name] = {}
        for field, doc in itertools.pairwise(node.body):
            target = field.target if isinstance(field, ast.AnnAssign) else None
            text = (
                doc.value.value
                if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                else None
            )
            if isinstance(target, ast.Name) and isinstance(text, str):
                docs[target.id] = inspect.cleandoc(text)
    return found


def _describe(definition: dict[str, Any], model: Any) -> None:
    """Give the schema of one of the protocol's models the descriptions its source holds as
    docstrings (a class's, and each field's, under it), which pydantic leaves out."""
    if model is None:
        return
    definition.setdefault("description", inspect.getdoc(model) or model.__name__)
    docs: dict[str, str] = {}
    classes = _field_docs(inspect.getmodule(model))
    for klass in reversed(model.__mro__):
        docs.update(classes.get(klass.__name__, {}))
    for name, field in model.model_fields.items():
        prop = definition.get("properties", {}).get(field.alias or name)
        if prop is not None:
            prop.setdefault("description", docs.get(name, name))


def _discriminators(nodes: list[Any]) -> list[dict[str, Any]]:
    found = []
    while nodes:
        node = nodes.pop()
        if isinstance(node, dict):
            if isinstance(node.get("discriminator"), dict) and "mapping" in node["discriminator"]:
                found.append(node["discriminator"])
            nodes.extend(node.values())
        elif isinstance(node, list):
            nodes.extend(node)
    return found


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
    _agui_input(schema, components)
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
    "of its identity provider: a JWT signed RS256 or ES256. See the README, 'Authentication'.",
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
