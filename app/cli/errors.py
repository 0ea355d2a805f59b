"""What the CLI reports and exits on: one exception tree, each with its exit code.

    CliError                      (exit_code)
    ├── UsageError                the command line asks for something impossible (exit 2)
    ├── ServiceError              the service answered 4xx/5xx: status, type, message (exit 9)
    └── UnreachableError          no answer at all: cannot connect (exit 10)
        └── ConnectionLostError   the connection broke mid-answer (a stream is reconnected)

`app.cli.client` translates httpx's errors into these at its boundary; `app.cli.commands`
prints them, one line, and exits with their code.
"""

from __future__ import annotations

from typing import Any

from app.cli.exits import ExitCode


class CliError(Exception):
    exit_code: ExitCode = ExitCode.API_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(CliError):
    exit_code = ExitCode.USAGE


class ServiceError(CliError):
    """The service refused the request; `message` is its own words."""

    exit_code = ExitCode.API_ERROR

    def __init__(
        self, status: int, type: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.details = details or {}

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.message}"


class UnreachableError(CliError):
    exit_code = ExitCode.UNREACHABLE


class ConnectionLostError(UnreachableError):
    """The connection broke after the request was sent, or a stream closed before its end."""
