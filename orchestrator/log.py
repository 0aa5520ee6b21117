"""structlog set-up: a line per event for a person on stderr, and JSON lines into the job directory."""

from __future__ import annotations

import importlib
import importlib.abc
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from orchestrator import scrub

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec


class _HideRich(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name == "rich" or name.startswith("rich."):
            raise ImportError(f"{name} is hidden from structlog")
        return None


def _import_structlog() -> ModuleType:
    """structlog, loaded without the parts of rich not yet loaded, and with asyncio loaded
    at its first use (_OnFirstUse). With rich installed, structlog imports rich's traceback
    and pretty-printer for its console renderer: 40-70 ms of every run's start-up (python -X
    importtime). Orchestra renders JSON lines (and text tracebacks), so those rich modules
    are hidden while structlog loads; the CLI's own rich imports are unaffected. Every
    orchestra module gets structlog from here."""
    if "structlog" in sys.modules:
        return sys.modules["structlog"]
    hide = _HideRich()
    sys.meta_path.insert(0, hide)
    on_first_use = "asyncio" not in sys.modules
    if on_first_use:
        sys.modules["asyncio"] = _OnFirstUse("asyncio")
    try:
        import structlog
    finally:
        sys.meta_path.remove(hide)
        if on_first_use and isinstance(sys.modules.get("asyncio"), _OnFirstUse):
            del sys.modules["asyncio"]  # the next `import asyncio` is the real one
    return structlog


class _OnFirstUse(ModuleType):
    """What structlog's modules get for asyncio, which they import for their async logging
    methods alone (orchestra never calls them; loading asyncio costs 11 ms of every run's
    start-up): the real module is imported when one of its attributes is first used."""

    def __getattr__(self, attr: str) -> object:
        return getattr(importlib.import_module(self.__name__), attr)


structlog = _import_structlog()
get_logger = structlog.get_logger


def configure(verbose: bool = False, json_file: Path | None = None) -> None:
    """Events to stderr as one human line each (warnings and worse; everything with
    `verbose`), and every event as a JSON line into `json_file` (the job's events.jsonl).
    Both are scrubbed of live secrets; so are other libraries' log records."""
    shared = [structlog.processors.add_log_level, scrub.structlog_processor,
              structlog.processors.TimeStamper(fmt="iso")]
    handlers: list[logging.Handler] = []
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.DEBUG if verbose else logging.WARNING)
    console.setFormatter(_formatter(structlog.dev.ConsoleRenderer(colors=False), shared))
    handlers.append(console)
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        _end_the_last_line(json_file)
        file_handler = _NoLinkFileHandler(json_file)
        file_handler.setLevel(logging.DEBUG)
        file_handler.setFormatter(_formatter(structlog.processors.JSONRenderer(), shared))
        handlers.append(file_handler)
    logging.basicConfig(level=logging.DEBUG, handlers=handlers, force=True)
    for noisy in ("urllib3", "docker", "filelock"):  # their debug lines are not events
        logging.getLogger(noisy).setLevel(logging.WARNING)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )


def _formatter(render: object, shared: list[object]) -> logging.Formatter:
    """One handler's rendering of the events (each handler its own: JSON into the file,
    a line for a person on stderr); `shared` runs first on other libraries' records."""
    return structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, render],
        foreign_pre_chain=shared)


class _NoLinkFileHandler(logging.FileHandler):
    """A FileHandler that appends without following a link (a job folder made elsewhere
    is input): a link at its path is InputError naming it."""

    def _open(self) -> Any:
        from orchestrator.util import open_no_link  # util loads pydantic: not at start-up

        fd = open_no_link(Path(self.baseFilename), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


def _end_the_last_line(path: Path) -> None:
    """A process killed mid-write (SIGKILL, a full disk) can leave events.jsonl's last line
    half written; the resumed job's first event goes on a line of its own, so only that
    half line is unreadable, not the next one too."""
    from orchestrator.util import open_no_link

    try:
        with os.fdopen(open_no_link(path, os.O_RDWR), "rb+") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size:
                handle.seek(size - 1)
                if handle.read(1) != b"\n":
                    handle.write(b"\n")
    except FileNotFoundError:
        pass
