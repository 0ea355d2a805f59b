"""finishline: run ReAct LLM agents over HTTP, and know when they are done."""

__version__ = "0.1.0"
