"""The ReAct engine: pure control flow. No HTTP, no storage; it yields steps."""
