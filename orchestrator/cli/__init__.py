"""The command line: the typer app (app), the run and reporting commands (commands),
the admin commands (admin)."""

from orchestrator import public_face

__all__ = ["app", "main"]
__getattr__, __dir__ = public_face(__name__, {
    "main": "commands",
    "app": "app",
})
