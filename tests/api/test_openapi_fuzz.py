"""Property-based tests of every operation in /openapi.json with schemathesis: whatever a
client sends, the service answers no 5xx, and every answer matches the published schema
(status code, content type, headers, body). Every built-in check runs (`--checks all`), one
(positive_data_acceptance) replaced by a stricter one of ours; then every link of the schema is
followed from runs it creates (a deterministic stateful phase). Derandomized, with a budget of
about a minute.

Schemathesis reaches the app over its own ASGI client (lifespan included, on a thread of its
own); its pytest plugin ends that lifespan after each test.
"""

from __future__ import annotations

import importlib
import pkgutil

import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.config._checks import NegativeDataRejectionConfig
from schemathesis.specs.openapi.checks import positive_data_acceptance

from app.main import create_app
from tests.api.kit import settings


def _import_all_of_schemathesis() -> None:
    """Import every module of schemathesis now, at collection, not lazily mid-test.

    Schemathesis imports some modules on first use (checks, auth); pytest rewrites a plugin's
    modules as they load; and CPython 3.11.7's `ast.parse` then fails ("AST constructor
    recursion depth mismatch") when called under the recursion limit hypothesis raises while
    a test runs. Loaded here, they are parsed with the normal limit."""
    for module in pkgutil.walk_packages(schemathesis.__path__, "schemathesis."):
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional extra that is not installed: never used here
            continue


_import_all_of_schemathesis()

# Every run ends within a few seconds and a wait lasts at most one, so no generated request
# (a scripted reply with a long delay, a long wait, a stream) can hold the test up.
FUZZED = settings(
    max_time_s=2,
    max_time_limit_s=2,
    final_answer_timeout_s=1,
    final_answer_timeout_limit_s=1,
    max_wait_s=1,
    # the host of the documented HTTP tool example (never reached: no model calls it)
    http_tool_allow_hosts=["api.example.com"],
)
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(FUZZED))
load_all_checks()
# a schema-violating body may also be refused for its size alone (413, documented)
_rejection = schema.config.checks.negative_data_rejection
schema.config.checks.negative_data_rejection = NegativeDataRejectionConfig(
    expected_statuses=[*_rejection.expected_statuses, "413"]
)
ALL_CHECKS = [c for c in CHECKS.get_all() if c is not positive_data_acceptance]


def refusals_of_valid_requests_name_a_server_check(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case
) -> None:
    """A request the schema allows may still get 422, but only from a check the static schema
    cannot state (DESIGN §2, §5): a server cap, an allow-list, a registered tool or model
    name. Those answers name the one field (`details.field`); a 422 from schema validation
    itself (`details.errors`) would mean the schema and the models disagree."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return
    if response.status_code == 422:
        details = response.json()["error"]["details"]
        assert "field" in details, f"a schema-valid request failed validation: {response.text}"


@schema.parametrize()
@hypothesis_settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_every_operation_answers_within_its_schema_and_never_5xx(case: schemathesis.Case) -> None:
    case.call_and_validate(
        # every built-in check but positive_data_acceptance, replaced by the check above:
        # schema-valid requests over a runtime-only check (a combined count, an allow-list,
        # a registered model or tool name) are refused with a 422 naming the field by design
        checks=ALL_CHECKS,
        additional_checks=[refusals_of_valid_requests_name_a_server_check],
    )


LINKS = schema.raw_schema["paths"]["/runs"]["post"]["responses"]["202"]["links"]
OPERATIONS = {
    op.definition.raw["operationId"]: op for op in (r.ok() for r in schema.get_all_operations())
}


@schema.include(path="/runs", method="POST").parametrize()
@hypothesis_settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_link_from_a_created_run_answers_within_the_schema(case: schemathesis.Case) -> None:
    """The stateful phase, made deterministic: from each run a generated POST /runs creates,
    follow every link the schema declares (read, wait, events, cancel, stream token, delete)
    with the run id the link names, each answer checked like any other. (Hypothesis' own
    state machine cannot replay a sequence against runs that have since moved on.)"""
    created = case.call_and_validate(
        checks=ALL_CHECKS, additional_checks=[refusals_of_valid_requests_name_a_server_check]
    )
    if created.status_code != 202:
        return
    run_id = created.json()["id"]
    for link in LINKS.values():
        assert link["parameters"] == {"run_id": "$response.body#/id"}
        linked = OPERATIONS[link["operationId"]].Case(path_parameters={"run_id": run_id})
        linked.call_and_validate(
            checks=ALL_CHECKS, additional_checks=[refusals_of_valid_requests_name_a_server_check]
        )


def test_the_documented_examples_are_accepted() -> None:
    """Each example of POST /runs in the schema (and the HTTP tool example in a run) is a
    run this server starts: schemathesis sends them first, as schema-valid requests."""
    components = schema.raw_schema["components"]["schemas"]
    bodies = list(components["RunCreate"]["examples"])
    bodies += [{"task": "Look up order 42.", "http_tools": components["HttpToolIn"]["examples"]}]
    for body in bodies:
        case = schema["/runs"]["POST"].Case(body=body, media_type="application/json")

        response = case.call()

        assert response.status_code == 202, response.text
