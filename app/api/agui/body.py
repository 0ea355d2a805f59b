"""The POST /runs body of a turn's new run, checked exactly as POST /runs checks its own
(`app.api.runbody`: sizes, caps, values), each refusal naming where in the AG-UI input the
field came from (`forwardedProps.finishline.settings.max_steps`, `messages`, `tools[0]`)."""

from __future__ import annotations

from typing import Any

from fastapi.exceptions import RequestValidationError

from app.api.agui.turns import Turn, relocated, where
from app.api.runbody import read_run_body
from app.runs.errors import InvalidRunError
from app.runs.spec import RunRequest
from app.settings import Settings


def _path(field_name: str) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    for piece in field_name.replace("]", "").split("."):
        name, *indexes = piece.split("[")
        parts.append(name)
        parts += [int(i) if i.isdigit() else i for i in indexes]
    return tuple(parts)


def _field(parts: tuple[Any, ...]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class TurnRunBody:
    """`read_run_body` for a turn (an `app.api.agui.session.NewRun`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def __call__(self, turn: Turn, raw: bytes) -> tuple[RunRequest, str, bool]:
        try:
            body, request, digest = await read_run_body(raw, self.settings)
        except RequestValidationError as exc:
            errors = []
            for error in exc.errors():
                loc = tuple(error.get("loc", ()))
                if loc[:1] == ("body",):
                    loc = ("body", *_path(where(_field(loc[1:]) or "body", turn)))
                errors.append({**error, "loc": loc})
            raise RequestValidationError(errors) from None
        except InvalidRunError as exc:
            raise relocated(exc, turn) from None
        return request, digest, body.on_disconnect == "cancel"
