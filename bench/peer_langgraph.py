"""The peer: LangGraph's prebuilt ReAct agent (`create_react_agent`) on the same workload as
the engine benchmark: a zero-latency fake chat model that calls a no-op tool on every turn
but the last, which answers without a tool call (LangGraph's way to end a run).

Needs the `bench` extra (langgraph, langchain-core). The graphs are compiled once and
reused, as a server would; each run is one `ainvoke`.
"""

from __future__ import annotations

import warnings
from typing import Any

TASK = "Call the noop tool until you are done."


def build(steps: int) -> Any:
    """A compiled ReAct graph whose runs take `steps` model turns (steps - 1 tool calls)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.messages import AIMessage, BaseMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langchain_core.tools import tool
        from langgraph.prebuilt import create_react_agent

    class FakeToolCallingModel(BaseChatModel):
        """Zero latency: turn n calls noop(i=n), the last turn answers."""

        turns: int

        @property
        def _llm_type(self) -> str:
            return "fake-tool-calling"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _reply(self, messages: list[BaseMessage]) -> ChatResult:
            n = sum(1 for m in messages if isinstance(m, AIMessage))
            if n < self.turns - 1:
                message = AIMessage(
                    content=f"Step {n + 1}: calling the tool.",
                    tool_calls=[{"name": "noop", "args": {"i": n}, "id": f"call_{n}"}],
                )
            else:
                message = AIMessage(content="done")
            return ChatResult(generations=[ChatGeneration(message=message)])

        def _generate(self, messages: list[BaseMessage], *args: Any, **kw: Any) -> ChatResult:
            return self._reply(messages)

        async def _agenerate(
            self, messages: list[BaseMessage], *args: Any, **kw: Any
        ) -> ChatResult:
            return self._reply(messages)

    @tool
    async def noop(i: int) -> str:
        """Does nothing."""
        return "ok"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_react_agent(FakeToolCallingModel(turns=steps), [noop])


async def run(graph: Any, steps: int) -> int:
    """One run; returns the number of model turns it took (checked by the caller)."""
    from langchain_core.messages import AIMessage

    state = await graph.ainvoke(
        {"messages": [("user", TASK)]}, config={"recursion_limit": 4 * steps + 10}
    )
    return sum(1 for m in state["messages"] if isinstance(m, AIMessage))


def available() -> str | None:
    """None when LangGraph can run, else why not."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import langgraph.prebuilt  # noqa: F401
    except ImportError as exc:
        return f"LangGraph is not installed ({exc}): install the bench extra"
    return None
