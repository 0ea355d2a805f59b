"""The OpenAPI schema documents every model and field, and advertises the error shape the
API really answers with."""

from __future__ import annotations

from typing import Any

from app.main import create_app
from tests.fakes.service import service_settings


def openapi() -> dict[str, Any]:
    return create_app(service_settings()).openapi()


def test_every_model_and_field_has_a_description() -> None:
    undocumented = []
    for name, schema in openapi()["components"]["schemas"].items():
        if "description" not in schema:
            undocumented.append(name)
        for prop, prop_schema in schema.get("properties", {}).items():
            if "description" not in prop_schema:
                undocumented.append(f"{name}.{prop}")
    assert undocumented == []


def test_every_operation_has_a_summary() -> None:
    operations = [op for path in openapi()["paths"].values() for op in path.values()]
    assert [op["operationId"] for op in operations if not op.get("summary")] == []


def test_validation_errors_are_advertised_with_our_error_body() -> None:
    spec = openapi()
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            error = op["responses"].get("422")
            if error is not None:
                schema = error["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path)


def test_run_request_has_examples() -> None:
    schemas = openapi()["components"]["schemas"]
    assert schemas["RunCreate"]["examples"]
    assert schemas["RunSettingsIn"]["examples"]
