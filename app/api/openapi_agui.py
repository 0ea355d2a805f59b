"""POST /ag-ui's body as the OpenAPI document declares it (`app.api.openapi`): AG-UI's
`RunAgentInput` from the protocol's own model, with the descriptions its source keeps as
docstrings, and what this server adds and enforces: the id lengths, a frontend tool's name and
schema, text content, the fields `forwardedProps.finishline` takes, and, as far as JSON Schema
can say it, that a turn brings the user's new message unless it answers interrupts."""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
from typing import Any

AGUI_PREFIX = "AgUi."
AGUI_NOT_IN_PROPS = ("task", "stream", "previous_run_id")


def agui_input(schema: dict[str, Any], components: dict[str, Any]) -> None:
    """POST /ag-ui reads its body itself too: declare AG-UI's `RunAgentInput`, from the
    protocol's own model (imported now, when the document is first asked for), with what this
    server adds: the id lengths, the names a frontend tool may have, the fields
    `forwardedProps.finishline` takes (POST /runs's, but task, stream and previous_run_id),
    and what it reads of the messages and tools (`_what_is_read`)."""
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
    _what_is_read(declared, components, ref)
    components[AGUI_PREFIX + "RunAgentInput"] = declared
    body = {"$ref": ref.format(model="RunAgentInput")}
    operation["requestBody"]["content"]["application/json"]["schema"] = body


MESSAGES = (
    "The conversation. Unless `resume` answers the thread's interrupts, its last message is "
    "the user's new message, the run's task (non-blank text): a turn that neither brings one "
    "nor answers anything is a 422 naming `messages` (JSON Schema cannot say which item is "
    "last: the document requires a user message among them). Content is read as text: other "
    "parts (images, audio, files) are a 422 naming the part."
)


def _what_is_read(declared: dict[str, Any], components: dict[str, Any], ref: str) -> None:
    """What the handler refuses of a `RunAgentInput` the protocol allows (app.api.agui.turns),
    declared where JSON Schema can say it: a turn has a user message unless `resume` answers
    something; content is text; a frontend tool's `parameters`, when given, is an object."""
    declared["properties"]["messages"]["description"] = MESSAGES
    user = {"$ref": ref.format(model="UserMessage")}
    declared["anyOf"] = [
        {"required": ["resume"], "properties": {"resume": {"type": "array", "minItems": 1}}},
        {"properties": {"messages": {"type": "array", "minItems": 1, "contains": user}}},
    ]
    text = {"$ref": ref.format(model="TextPart")}
    for model in ("UserMessage", "ToolMessage"):
        content = components[AGUI_PREFIX + model]["properties"]["content"]
        for branch in content["anyOf"]:
            if branch.get("type") == "array":
                branch["items"] = text
    parameters = components[AGUI_PREFIX + "Tool"]["properties"]["parameters"]
    parameters["anyOf"] = [{"type": "object"}, {"type": "null"}]


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
