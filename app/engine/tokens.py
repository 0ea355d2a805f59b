"""Token estimates, for providers that report no usage and for the per-call context cap.

An estimate is UTF-8 bytes / 4: about right for English, and for Chinese (3 bytes a
character, about one token a character) it errs low by a quarter rather than wildly.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.engine.ports import Message, Reply, TokenUsage

MESSAGE_OVERHEAD = 4


def estimate_text(text: str | None) -> int:
    if not text:
        return 0
    # isascii() is O(1) in CPython: ASCII text is as many UTF-8 bytes as characters
    return (len(text) if text.isascii() else len(text.encode("utf-8"))) // 4


def estimate_message(message: Message) -> int:
    tokens = MESSAGE_OVERHEAD + estimate_text(message.get("content"))
    calls = message.get("tool_calls")
    if calls:
        for call in calls:
            function = call["function"]
            tokens += estimate_text(function["name"]) + estimate_text(function["arguments"])
    return tokens


def estimate_tokens(messages: Sequence[Message]) -> int:
    return sum(map(estimate_message, messages))


def estimate_reply_tokens(prompt_tokens: int, reply: Reply) -> TokenUsage:
    """Usage of a reply the provider reported none for; `prompt_tokens` is the prompt's
    estimate (`RunState.prompt_estimate` plus the tool specs)."""
    completion = estimate_text(reply.content) + sum(
        estimate_text(c.name) + estimate_text(c.arguments) for c in reply.tool_calls
    )
    return TokenUsage(prompt_tokens, completion, estimated=True)
