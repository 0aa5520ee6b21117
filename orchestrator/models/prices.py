"""Model prices in USD per million tokens: what a call's counted usage costs.

Where a model's price comes from, first found wins: the manifest's `prices` (keyed by the
endpoint's model name), the endpoint config's `prices`, then `DEFAULT_PRICES` below. A
model found in none has no price: its calls add no dollars and the trial's cost is said
as unknown (never as $0), and a cost budget refuses its calls.

DEFAULT_PRICES are the providers' published list prices for standard (not batch, not
cached) input and output, as of PRICES_AS_OF; they change, and a deployment's own prices
(discounts, a proxy's markup) are the user's: set them in the endpoint config. The local
models `make local-model` serves cost nothing.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Prices(BaseModel):
    """USD per million tokens, standard input and output."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    input: float = Field(ge=0)
    output: float = Field(ge=0)


PRICES_AS_OF = "2025-06"
_LIST: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "claude-sonnet-4-20250514": (3.00, 15.00),
    "claude-opus-4-20250514": (15.00, 75.00),
    "claude-3-5-haiku-20241022": (0.80, 4.00),
    "gemini-2.5-pro": (1.25, 10.00),
    "gemini-2.5-flash": (0.30, 2.50),
    # served on this machine by `make local-model`: no money changes hands
    "qwen2.5-coder-0.5b-instruct": (0.0, 0.0),
}


DEFAULT_PRICES: dict[str, Prices] = {model: Prices(input=i, output=o) for model, (i, o) in _LIST.items()}


def price_of(model: str, manifest: dict[str, dict[str, float]], endpoint: Prices | None) -> Prices | None:
    """The model's prices (None when none is known: its cost is unknown)."""
    if model in manifest:
        return Prices.model_validate(manifest[model])
    return endpoint or DEFAULT_PRICES.get(model)
