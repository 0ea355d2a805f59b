"""The graph `langgraph dev` serves in the service benchmark: LangGraph's prebuilt ReAct agent
with a calculator tool and langchain-openai's `ChatOpenAI` calling the benchmark's fake
OpenAI-compatible server over HTTP (`BENCH_LLM_BASE_URL`), the same workload as finishline's
runs: 4 calculator calls, then the answer.

This file is copied into a temporary directory next to a generated `langgraph.json` and runs
in LangGraph's own venv (.venv-langgraph), never imported by finishline's.
"""

from __future__ import annotations

import os

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression of integers and + (e.g. "2+3")."""
    return str(sum(int(term) for term in expression.split("+")))


model = ChatOpenAI(
    model="fake-model",
    base_url=os.environ["BENCH_LLM_BASE_URL"],
    api_key="not-needed",  # the fake server checks none
    max_retries=0,
    timeout=300,
)
graph = create_react_agent(model, [calculator])
