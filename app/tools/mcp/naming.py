"""The names MCP tools get here: `SERVER__TOOL`, kept to what chat APIs accept.

A chat API takes a function name of 1 to 64 letters, digits, '_' or '-'. An MCP tool name
may be longer or hold other characters ('.', '/'); such a name keeps a readable prefix
(other characters become '_') and ends in a hash of the server and the original tool name,
so it is stable across restarts and distinct from every other tool's.
"""

from __future__ import annotations

import hashlib
import re

SEPARATOR = "__"
MAX_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASH_CHARS = 8


def exposed_name(server: str, tool: str) -> str:
    """`server__tool`, or a shortened or cleaned name with a stable hash suffix."""
    name = f"{server}{SEPARATOR}{tool}"
    clean = _UNSAFE.sub("_", name)
    if clean == name and len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_HASH_CHARS]
    return f"{clean[: MAX_NAME - _HASH_CHARS - 1]}_{digest}"
