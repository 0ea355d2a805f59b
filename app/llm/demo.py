"""The `demo` model: the embedded default when no LLM endpoint is configured.

A fixed, deterministic agent that uses whichever built-in tools the run offers (update_plan,
calculator, current_time), then finishes, so a newcomer sees a whole run stream with no API
key. It says plainly that it is the demo model. Asked to plan (a planning call's
`force_tool="update_plan"`, plan-then-execute), it answers with its plan alone, each step
marked by how far it has got. With an output schema (DESIGN §12) it answers with a value made
up to match it (`app.llm.demo_values`): as task_finished's `answer` (whose parameter is the
schema), or as JSON text when asked for one (`answer_schema`: the stop tool off, the final
call). Offered sub-agents (tools of one `task` parameter, DESIGN §15), it routes: its first
turn hands the task to each of them at once, and it answers from what they said (a router and
its workers, on the demo model alone). With an outcome (DESIGN §22) it grades too, and revises
once: as the grader it finds a first text answer unmet, and a revised one met; as the agent,
told its answer was unmet, it answers again, marked revised (`REVISED`).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from app.engine.ports import FREE, DeltaSink, Message, Price, Reply, ToolCall, ToolSpec
from app.engine.prompts import SUBMIT_VERDICT, TASK_FINISHED, UPDATE_PLAN
from app.llm.demo_values import example

DEMO_NOTICE = (
    "I am finishline's built-in demo model, not a real LLM: no model endpoint is configured, "
    "so I follow a fixed script to show how a run streams."
)
REVISED = "(revised after review)"
"""How the demo marks an answer it gave again after an unmet verdict; its grader meets it."""
_DEMO_FINISH = "demo_3_task_finished"
_ARITHMETIC = re.compile(r"[\d(][\d\s+\-*/%.()^]*[\d)]")


def _expression(task: str) -> str:
    candidates = [m.group().strip() for m in _ARITHMETIC.finditer(task)]
    candidates = [c for c in candidates if any(op in c for op in "+-*/%^")]
    return max(candidates, key=len).replace("^", "**") if candidates else "6 * 7"


def _call(n: int, name: str, arguments: dict[str, object]) -> ToolCall:
    return ToolCall(f"demo_{n}_{name}", name, json.dumps(arguments))


def _is_agent(tool: ToolSpec) -> bool:
    """A sub-agent's tool (DESIGN §15): one parameter, its task."""
    return list(tool.parameters.get("properties", {})) == ["task"]


_RETURNED = re.compile(r"What my tools returned: (.*?)\. Point finishline", re.S)


def _gist(result: str) -> str:
    """What a demo sub-agent found (its tools' results), else its answer's first line."""
    found = _RETURNED.search(result)
    return found.group(1) if found else result.strip().splitlines()[0] if result.strip() else ""


PLAN = ("Compute with the calculator", "Check the time", "Give the answer")


def _plan(done: int) -> dict[str, object]:
    """update_plan's arguments with the first `done` steps completed, the next in progress."""
    statuses = ["completed"] * done + ["in_progress"] + ["pending"] * len(PLAN)
    return {"plan": [{"step": s, "status": t} for s, t in zip(PLAN, statuses, strict=False)]}


def _just_planned(messages: Sequence[Message]) -> bool:
    """Whether the last reply with tool calls only planned (a planning call's)."""
    for m in reversed(messages):
        if m["role"] == "assistant" and m.get("tool_calls"):
            return all(c["function"]["name"] == UPDATE_PLAN for c in m["tool_calls"])
    return False


def _work_turns(messages: Sequence[Message]) -> int:
    """The replies with tool calls so far, leaving out those that only planned."""
    return sum(
        1
        for m in messages
        if m["role"] == "assistant"
        and any(c["function"]["name"] != UPDATE_PLAN for c in m.get("tool_calls") or ())
    )


class DemoModel:
    name = "demo"

    def __init__(self, *, delay_s: float = 0.3, price: Price | None = FREE) -> None:
        self.delay_s = delay_s
        self.price = price

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: DeltaSink | None = None,
        force_tool: str | None = None,
        answer_schema: Mapping[str, Any] | None = None,
    ) -> Reply:
        names = {t.name for t in tools}
        if force_tool == UPDATE_PLAN and UPDATE_PLAN in names:
            reply = self._planned(messages)
        elif force_tool == SUBMIT_VERDICT and SUBMIT_VERDICT in names:
            reply = self._graded(messages)
        else:
            agents = [t.name for t in tools if _is_agent(t)]
            reply = self._next(messages, tools, answer_schema, agents)
        if on_delta is not None and reply.content:
            words = reply.content.split(" ")
            for i, word in enumerate(words):
                await asyncio.sleep(self.delay_s / max(len(words), 1))
                on_delta(word if i == 0 else " " + word)
        else:
            await asyncio.sleep(self.delay_s)
        return reply

    def _planned(self, messages: Sequence[Message]) -> Reply:
        """A planning call's answer: the plan alone, as far as the run has got."""
        done = min(_work_turns(messages), len(PLAN) - 1)
        planned = sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
        text = (
            f"{DEMO_NOTICE} Asked to plan first, I record my plan."
            if done == 0
            else ("Asked to review my plan, I record how far I have got.")
        )
        call = ToolCall(f"demo_plan_{planned}", UPDATE_PLAN, json.dumps(_plan(done)))
        return Reply(content=text, tool_calls=(call,), finish_reason="tool_calls")

    @staticmethod
    def _graded(messages: Sequence[Message]) -> Reply:
        """A grader's verdict: a first text answer of the demo's own is unmet (so the loop
        shows), a revised one or any other answer met."""
        request = str(messages[-1]["content"]) if messages else ""
        unmet = "[demo model]" in request and REVISED not in request
        feedback = (
            "[demo grader] A first answer never passes the demo grader, so that you see the "
            "loop: revise it once against the rubric."
            if unmet
            else "[demo grader] The answer meets the rubric, as far as the demo model can tell."
        )
        verdict = {"satisfied": not unmet, "feedback": feedback}
        call = ToolCall("demo_verdict", SUBMIT_VERDICT, json.dumps(verdict))
        return Reply(content=None, tool_calls=(call,), finish_reason="tool_calls")

    def _next(
        self,
        messages: Sequence[Message],
        specs: Sequence[ToolSpec],
        answer_schema: Mapping[str, Any] | None,
        agents: Sequence[str] = (),
    ) -> Reply:
        tools = {t.name for t in specs}
        task = next((m["content"] for m in messages if m["role"] == "user"), "")
        turns = _work_turns(messages)
        results = [
            m["content"]
            for m in messages
            if m["role"] == "tool" and m.get("tool_call_id") != _DEMO_FINISH  # (a verdict's)
        ]
        if not tools:  # the degraded final call: answer from what we have
            return Reply(content=self._text(results, answer_schema), finish_reason="stop")
        if agents:  # a router: the task to each sub-agent at once, then their answers
            return self._route(str(task), turns, results, agents, tools)
        expression = _expression(str(task))
        if turns == 0 and "calculator" in tools:
            calls = [_call(1, "calculator", {"expression": expression})]
            if UPDATE_PLAN in tools and not _just_planned(messages):
                calls.insert(0, _call(1, UPDATE_PLAN, _plan(0)))
            text = f"{DEMO_NOTICE} First I will compute {expression} with the calculator."
            return Reply(content=text, tool_calls=tuple(calls), finish_reason="tool_calls")
        if turns <= 1 and "current_time" in tools and not any("UTC" in r for r in results):
            calls = [_call(2, "current_time", {"timezone": "UTC"})]
            if UPDATE_PLAN in tools:
                calls.append(_call(2, UPDATE_PLAN, _plan(1)))
            text = "Next I will look up the current time."
            return Reply(content=text, tool_calls=tuple(calls), finish_reason="tool_calls")
        finish = next((s for s in specs if s.name == TASK_FINISHED), None)
        if finish is not None:
            parameters = finish.parameters  # its `answer`: the text, or the output schema
            answer = self._typed(parameters["properties"]["answer"], results, root=parameters)
            told = [m for m in messages if m.get("tool_call_id") == _DEMO_FINISH]
            if told and isinstance(answer, str):  # an unmet verdict: the answer again, revised
                return Reply(
                    content="The reviewer found my answer unmet, so I revise it.",
                    tool_calls=(_call(4, TASK_FINISHED, {"answer": f"{answer} {REVISED}"}),),
                    finish_reason="tool_calls",
                )
            return Reply(
                content="I have what I need, so I will finish.",
                tool_calls=(_call(3, TASK_FINISHED, {"answer": answer}),),
                finish_reason="tool_calls",
            )
        text = self._text(results, answer_schema)
        answered = any(
            m["role"] == "assistant" and str(m.get("content") or "").startswith("[demo model]")
            for m in messages
        )
        if answered and answer_schema is None:  # told its answer was unmet: revised
            text = f"{text} {REVISED}"
        return Reply(content=text, finish_reason="stop")

    def _text(self, results: list[str], schema: Mapping[str, Any] | None) -> str:
        """The answer as text: JSON matching `schema` when asked for one."""
        if schema is None:
            return self._answer(results)
        return json.dumps(self._typed(schema, results), ensure_ascii=False)

    def _typed(
        self,
        schema: Mapping[str, Any],
        results: list[str],
        root: Mapping[str, Any] | None = None,
    ) -> Any:
        """A value for `schema` (`$ref`s into `root`): its strings say what the tools
        returned, its numbers take what the calculator returned where it fits."""
        number = None
        for result in results:
            try:
                number = float(result.strip())
            except ValueError:
                continue
        if number is not None and number.is_integer():
            number = int(number)
        found = ", ".join(r.strip() for r in results if not r.startswith("Plan updated"))
        short = f"[demo model] my tools returned: {found or 'nothing'}"[:120]
        return example(schema, text=self._answer(results), short=short, number=number, root=root)

    def _route(
        self, task: str, turns: int, results: list[str], agents: Sequence[str], tools: set[str]
    ) -> Reply:
        if turns == 0:
            calls = tuple(_call(1, name, {"task": task}) for name in agents)
            text = f"{DEMO_NOTICE} I hand the task to my sub-agents: {', '.join(agents)}."
            return Reply(content=text, tool_calls=calls, finish_reason="tool_calls")
        said = "; ".join(_gist(r) for r in results) or "nothing"
        answer = f"[demo model] My sub-agents answered: {said}."
        if "task_finished" in tools:
            finish = _call(2, "task_finished", {"answer": answer})
            text = "My sub-agents have answered, so I will finish."
            return Reply(content=text, tool_calls=(finish,), finish_reason="tool_calls")
        return Reply(content=answer, finish_reason="stop")

    @staticmethod
    def _answer(results: list[str]) -> str:
        found = " ".join(r.strip() for r in results if not r.startswith("Plan updated")) or "none"
        return (
            f"[demo model] {DEMO_NOTICE} What my tools returned: {found}. "
            "Point finishline at a real model with FINISHLINE_LLM_BASE_URL, "
            "FINISHLINE_LLM_API_KEY and FINISHLINE_LLM_MODEL for real answers."
        )
