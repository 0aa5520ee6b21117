"""Start-up measured as a README install has it (`make setup`: `pip install -e`, nothing
compiled). The timed `orchestra` processes import orchestra from a fresh copy of its source
(orchestrator/ and images/, no __pycache__), so bytecode someone else's run left in the
checkout (or a compileall) does not make start-up look faster than an install's. With
PYTHONDONTWRITEBYTECODE=1 (these machines set it) every process then compiles orchestra's
modules from source, as every `orchestra` command of a README install here does; without
it, the first run writes bytecode into the copy and the later ones use it, as an install's
later commands would. Installed dependencies keep their bytecode (pip compiled them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_PARTS = ("orchestrator", "images")  # the package, and the agent stack paths.py finds beside it


def readme_install(tmp: Path) -> dict[str, str]:
    """The environment of a timed `orchestra` process: orchestra from a bytecode-free copy
    of the checkout under `tmp` (first on PYTHONPATH, ahead of the editable install)."""
    source = tmp / "readme-install"
    if not source.exists():
        for part in SOURCE_PARTS:
            shutil.copytree(ROOT / part, source / part, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    path = [str(source), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def bytecode_note(env: dict[str, str]) -> str:
    """How the timed processes got orchestra's bytecode (printed beside startup_seconds)."""
    if env.get("PYTHONDONTWRITEBYTECODE"):
        return "none: compiled from source by every process (PYTHONDONTWRITEBYTECODE set, as on a README install here)"
    return "written by the first process, used by the later ones (as a README install's later commands)"
