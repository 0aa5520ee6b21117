"""The command line: the typer app (app), the run and reporting commands (commands),
the admin commands (admin)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.cli.commands import main

__all__ = ["main"]
__getattr__, __dir__ = public_face(__name__, {
    "main": "commands",
})
