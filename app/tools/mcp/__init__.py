"""Tools from MCP servers (DESIGN §11), over the official `mcp` SDK.

config.py      FINISHLINE_MCP_SERVERS: parse and check the configured servers
naming.py      NAME__TOOL names within [A-Za-z0-9_-]{1,64}
content.py     a tools/call result as the observation text
network.py     the HTTP tools' network guard, for Streamable HTTP servers
connection.py  one server's shared session: supervisor, reconnects, calls
source.py      McpToolSource (every server's tools) and McpTool
"""
