"""The errors that decide orchestra's exit codes.

InputError   -> exit 2: bad task, manifest, endpoint, seeds...; nothing started.
InfraError   -> exit 3: Docker unreachable or another failure before any trial ran.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic import ValidationError


class OrchestraError(Exception):
    exit_code = 1


class InputError(OrchestraError):
    """Bad user input. The message names the file and the field."""

    exit_code = 2

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class InfraError(OrchestraError):
    """The machine cannot run trials (Docker unreachable, no base image...)."""

    exit_code = 3


def validation_problems(file: Path, error: ValidationError, prefix: str = "",
                        explain_unknown: bool = False) -> list[str]:
    """A pydantic ValidationError as "FILE: field 'a.b': message" lines (DESIGN 2.1)."""
    problems = []
    for item in error.errors():
        field = prefix + ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"]
        if explain_unknown and item["type"] == "extra_forbidden":
            message = "unknown key (check the spelling; see DESIGN 3.1 for the fields)"
        problems.append(f"{file}: field '{field}': {message}")
    return problems
