"""Trees of runs (DESIGN §15): a sub-agent's child runs (`children`: `RunTree`, the engine's
`SubAgents` port) and approvals across a tree (`approvals`, worked out for `ApprovalDesk`)."""
