"""orchestra: a containerized evaluation orchestrator for AI agents.

The package is laid out by layer; a layer imports only the layers below it (the
architecture test holds this):

    cli/          the typer app: parse, call one function of the API, render
    api/          the Python API every command calls: runs (RunRequest -> run() ->
                  RunOutcome), admin (tasks, images, agents, cleanup), results (report,
                  compare, view)
    view/ report/ pages and reports over results already written
    job/          many trials: plan, scheduler, engine watch, pre-flight, summary, doctor
    executors/    where trials run: local threads, Ray
    trial/        one trial, phase by phase (lifecycle, images, sandbox, agent + workers,
                  collect, verify, steps, audit)
    agents/       host-side agent adapters
    services/     per-trial servers on the host: HTTP layer, relay, model proxy, replay,
                  egress proxy, exchange records
    host/         state shared by jobs on this host: network pool, watchdog, clean-up
    runtime/      the engine seam (base.py) and its Docker implementation
    tasks/        inputs: Harbor task folders, compose files, memory seeds, stand-ins
    models/       pydantic schemas at every boundary
    errors log paths archive scrub util   the kernel every layer may use

Each package's `__init__` is its public face: the names other layers use, loaded lazily
(`public_face`) so importing a package costs nothing until a name is used, and declared
under `if TYPE_CHECKING:` so mypy sees their real types. Other packages import only the
face (the architecture test holds this, with its exceptions named).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

GetAttr = Callable[[str], object]
Dir = Callable[[], list[str]]

__version__ = "0.1.0"


def public_face(package: str, exports: dict[str, str]) -> tuple[GetAttr, Dir]:
    """`__getattr__` and `__dir__` for a package that exports `name -> module` lazily."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
