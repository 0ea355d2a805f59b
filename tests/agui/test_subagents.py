"""Sub-agents over AG-UI (DESIGN §15, §16): `forwardedProps.finishline.agents` give the run
its workers, and each child run reaches the client as the protocol's own SUBAGENT_STARTED /
SUBAGENT_FINISHED around the call's tool result, checked by ag-ui-protocol's models."""

from __future__ import annotations

from tests.agui.kit import agent_input, of_type, scripted, stream, types, user
from tests.api.kit import settings
from tests.fakes.service import api_client

FINISH = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "4"}}]}


async def test_a_child_run_is_a_sub_agent_of_the_ag_ui_run() -> None:
    worker = {"description": "Adds.", "model": "scripted", "model_script": [FINISH]}
    config = scripted(
        {"tool_calls": [{"name": "calc", "arguments": {"task": "2+2"}, "id": "call_calc"}]},
        FINISH,
        agents={"calc": worker},
    )
    async with api_client(settings()) as client:
        response, events = await stream(client, agent_input(user("2+2?"), finishline=config))
        assert response.status_code == 200
        (started,) = of_type(events, "SUBAGENT_STARTED")
        child = (await client.get(f"/runs/{started['subagentRunId']}")).json()
    assert child["parent_call_id"] == "call_calc"
    assert child["parent_run_id"] is not None
    order = types(events)
    (finished,) = of_type(events, "SUBAGENT_FINISHED")
    assert started["name"] == "calc"
    assert started["parentToolCallId"] == "call_calc"
    assert finished["subagentRunId"] == started["subagentRunId"]
    assert started["subagentRunId"].startswith("run_")
    assert finished["result"]["status"] == "completed"
    result = order.index("TOOL_CALL_RESULT")
    assert order.index("SUBAGENT_STARTED") < order.index("SUBAGENT_FINISHED") < result
    assert order[-1] == "RUN_FINISHED"
