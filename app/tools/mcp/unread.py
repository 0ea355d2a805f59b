"""The answers this client makes up for a request whose real answer it did not read.

A transport that drops a message over the size cap (`framing.py`), abandons the exchange of
a cancelled call or refuses a compressed answer resolves the request with a JSON-RPC error
of its own, so the SDK's session fails that one request and nothing else: the session, and
every other call on it, go on. The codes lie outside the range JSON-RPC reserves (-32768 to -32000)
and never go on the wire.
"""

from __future__ import annotations

from mcp.shared.exceptions import MCPError
from mcp_types import ErrorData, JSONRPCError, RequestId

ANSWER_TOO_LARGE = -31_413
NOT_READ = -31_499

CAP_SETTING = "FINISHLINE_MCP_MAX_RESULT_BYTES"


def too_large(request_id: RequestId, cap: int) -> JSONRPCError:
    message = f"its answer passed the cap of {cap:,} bytes ({CAP_SETTING}) and was not read"
    data = {"cap_bytes": cap}
    return JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=ErrorData(code=ANSWER_TOO_LARGE, message=message, data=data),
    )


def not_read(request_id: RequestId, why: str) -> JSONRPCError:
    error = ErrorData(code=NOT_READ, message=f"its answer was not read: {why}")
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


def is_too_large(exc: MCPError) -> bool:
    """`exc` is the error `too_large` made (a server sending the same code is believed)."""
    return exc.code == ANSWER_TOO_LARGE


def encoded(error: JSONRPCError) -> bytes:
    return error.model_dump_json(by_alias=True, exclude_unset=True).encode()
