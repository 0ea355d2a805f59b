"""A2A (DESIGN §17): each agent profile is an A2A agent at `/a2a/NAME`, built on the official
`a2a-sdk` (its protocol models, JSON-RPC dispatcher, SSE framing, card encoder and 0.3
compatibility layer). Imported by the app's lifespan only when agent profiles are configured:
`server` builds the endpoints, `cards` the agent cards, `handler` answers the methods over
`RunManager`, `conversations` makes runs of messages (contextId as a conversation),
`listing` lists tasks, `tasks` and `updates` turn runs and their events into the protocol's
models, `parts` reads what a message says, `errors` turns refusals into A2A errors."""
