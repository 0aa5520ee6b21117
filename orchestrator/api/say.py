"""How the API hands its notes to a caller as they come (the CLI prints them on stderr)."""

from __future__ import annotations

from collections.abc import Callable

Say = Callable[[str], None]


def silent(text: str) -> None:
    """Where notes go when nobody listens (they are kept in the outcome all the same)."""
