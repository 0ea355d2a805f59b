"""Tools the agent can call, and the registry the API offers them from.

base.py        SchemaTool (JSON-schema validation), ToolError
calculator.py  calculator: safe arithmetic over a whitelisted AST
current_time.py current_time: now, in UTC or an IANA zone
plan.py        update_plan: the agent's plan, kept in the run's ToolContext
netguard.py    the HTTP allow-list and address rules; check_url_allowed (pure)
transport.py   an httpx transport pinned to the addresses the guard checked
fetcher.py     HttpFetcher: one guarded exchange (redirects, deadline, size cap)
http.py        http_get, and HttpTool for tools declared in a request
registry.py    ToolRegistry, UnknownToolError, builtin_registry()
mcp/           tools of MCP servers: McpToolSource (see its package docstring)
"""
