"""`FINISHLINE_MODEL_PRICES`: prices a deployment sets for models by name (DESIGN §13), over
those of genai-prices (app.llm.pricing) or for models it does not know (self-hosted ones).

The value is JSON, or `@path` naming a JSON file: `{"MODEL": {"input_per_mtok": USD,
"output_per_mtok": USD, "cached_input_per_mtok"?: USD}}`, USD per million tokens; cached input
is priced at the input rate when its own is omitted. Checked at start-up; a bad value stops
the service with a message naming the model and the field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.engine.ports import Price, Rates
from app.jsonsource import json_setting


class ModelPriceIn(BaseModel):
    """One model's price in `FINISHLINE_MODEL_PRICES`, in USD per million tokens."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    output_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    cached_input_per_mtok: float | None = Field(None, ge=0, allow_inf_nan=False)

    def price(self) -> Price:
        cached = self.cached_input_per_mtok
        cached = self.input_per_mtok if cached is None else cached
        return Price(Rates(self.input_per_mtok, self.output_per_mtok, cached))


def parse_model_prices(value: Any) -> dict[str, ModelPriceIn]:
    """`FINISHLINE_MODEL_PRICES` (JSON text, `@path`, or a mapping already decoded).

    Raises `ValueError` with one line per problem, each naming the model and the field."""
    value, source = json_setting(value, "FINISHLINE_MODEL_PRICES")
    if not isinstance(value, dict):
        raise ValueError(f"{source}: must be a JSON object of model name -> price")
    prices: dict[str, ModelPriceIn] = {}
    problems: list[str] = []
    for name, spec in value.items():
        if not name.strip():
            problems.append("a model name is empty")
            continue
        try:
            prices[name] = ModelPriceIn.model_validate(spec)
        except ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'value'}: {error['msg']}"
                for error in exc.errors()
            )
            problems.append(f"model {name!r}: {details}")
    if problems:
        raise ValueError(f"{source}: " + "; ".join(problems))
    return prices
