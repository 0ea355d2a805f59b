"""Property-based tests of every operation in /openapi.json with schemathesis: whatever a
client sends, the service answers no 5xx, and every answer matches the published schema
(status code, content type, headers, body). Every built-in check runs (`--checks all`), one
(positive_data_acceptance) replaced by a stricter one of ours; then two stateful phases: every
link of the schema followed from each run a generated request creates, and schemathesis's own
state machine (hypothesis' rule-based testing over the links: sequences of create, read, wait,
events, cancel, stream token and delete, each answer checked). Derandomized, with a budget of
about a minute.

The state machine is deterministic here. Hypothesis replays prefixes of earlier sequences to
build new ones, and which rules it may draw depends on what POST /runs answered (a link
starts from a 202 or a 200), which against one shared app depends on what earlier sequences
left in it (an Idempotency-Key already used answers 200 or 409, not 202): with 25 sequences
on one app, hypothesis stopped with "Inconsistent data generation" (FlakyStrategyDefinition).
So each sequence gets a fresh app and store: every answer a rule depends on is then a
function of the sequence alone. Derandomized with no
example database, it draws the same sequences on every run; answers that depend on timing
(cancelling a run that may have just ended: 202 or 409) are both within the schema and start
no link, so they decide nothing. Checked: 80 sequences, twice at once on the 2-core VM, pass.

Schemathesis reaches the app over its own ASGI client (lifespan included, on a thread of its
own); its pytest plugin ends that lifespan after each test.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, ClassVar

import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.config._checks import NegativeDataRejectionConfig
from schemathesis.config._phases import InferenceConfig
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
    # a profile the generated runs may name (`agent`'s schema lists this server's profiles)
    agents={"fuzzed": {"description": "A profile for the fuzzer.", "tools": ["calculator"]}},
)
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(FUZZED))
# the links the schema declares are followed, none inferred from a field's name (a pending
# approval's `run_id`, a sub-agent's run, DESIGN §15: deciding it is the approvals tests')
schema.config.phases.stateful.inference = InferenceConfig(algorithms=[])
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


# the agent profiles' operations are links of their own (GET /agents names what GET
# /agents/{name} takes, which schemathesis infers): sequences of those would crowd out the
# run's (the per-operation test above covers them)
RUN_LINKS = schema.exclude(path_regex="^/agents")


class RunsStateMachine(RUN_LINKS.as_state_machine()):  # type: ignore[misc]
    """Schemathesis's stateful phase: the links of POST /runs' 202, in generated sequences."""

    called: ClassVar[set[str]] = set()

    def setup(self) -> None:
        # a fresh app (and store) for each generated sequence: what a POST /runs answers
        # (202, or 200/409 for a reused Idempotency-Key) then depends on this sequence alone,
        # so replaying a sequence draws the same rules
        self.app = create_app(FUZZED)

    def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
        return {"app": self.app}

    def validate_response(
        self, response: schemathesis.Response, case: schemathesis.Case, *args: Any, **kwargs: Any
    ) -> None:
        self.called.add(case.operation.label)
        case.validate_response(
            response,
            checks=ALL_CHECKS,
            additional_checks=[refusals_of_valid_requests_name_a_server_check],
        )


def test_generated_sequences_over_the_links_answer_within_the_schema() -> None:
    RunsStateMachine.called.clear()

    RunsStateMachine.run(
        settings=hypothesis_settings(
            max_examples=25,
            stateful_step_count=6,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )

    linked = {OPERATIONS[link["operationId"]].label for link in LINKS.values()}
    assert linked <= RunsStateMachine.called  # every link was followed at least once


def test_an_optional_parameter_is_absent_never_null_in_the_schema() -> None:
    """A header or query parameter the client may leave out is declared as what it takes,
    with no `null` branch: a schema-driven client or fuzzer read FastAPI's `anyOf [..., null]`
    as "the text `null` is valid" and sent `Last-Event-ID: null`, which the server refuses."""
    for path, operations in schema.raw_schema["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                branches = parameter["schema"].get("anyOf", [parameter["schema"]])
                assert all(b.get("type") != "null" for b in branches), (path, method, parameter)


def test_every_schema_valid_request_for_a_runs_events_is_answered_200() -> None:
    """Whatever the schema allows in the query and headers of GET /runs/{id}/events (the
    seq to resume after, as `?after=` or `Last-Event-ID`, a page size, a token) the server
    takes: generated, derandomized, for one run that has ended."""
    created = schema["/runs"]["POST"].Case(
        body={"task": "t", "model": "scripted", "model_script": [{"content": "hi"}]},
        media_type="application/json",
    )
    run_id = created.call().json()["id"]
    events = schema["/runs/{run_id}/events"]["GET"]

    @given(case=events.as_strategy())
    @hypothesis_settings(
        max_examples=60,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def answered(case: schemathesis.Case) -> None:
        case.path_parameters = {"run_id": run_id}
        response = case.call()
        assert response.status_code == 200, (case.headers, case.query, response.text)

    answered()
