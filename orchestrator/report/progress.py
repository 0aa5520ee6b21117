"""Progress of a running job: a live rich display on a terminal (done / running / queued /
failed, elapsed, ETA, the current phase of each running trial and why queued trials wait
for admission), plain lines otherwise or with --quiet."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table

if TYPE_CHECKING:
    from orchestrator.models.result import TrialResult
    from orchestrator.tasks.load import Task


class Progress:
    def __init__(self, console: Console, live: bool | None = None):
        self.console = console
        self.live_mode = console.is_terminal if live is None else live
        self.total = 0
        self.done = 0
        self.failed = 0
        self.started = time.monotonic()
        self.running: dict[str, tuple[str, str]] = {}  # trial id -> (label, phase)
        self.waiting: dict[str, str] = {}  # task name -> why it waits for admission
        self._said_waiting = False
        self._lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> Progress:
        if self.live_mode:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4,
                              transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._live is not None:
            self._live.__exit__(kind, exc, traceback)

    def _eta(self) -> str:
        if not self.done or self.done >= self.total:
            return "-"
        rate = (time.monotonic() - self.started) / self.done
        return f"{rate * (self.total - self.done):.0f}s"

    def _render(self) -> Group:
        head = Table.grid(padding=(0, 2))
        queued = max(0, self.total - self.done - len(self.running))
        head.add_row(f"[bold]{self.done}/{self.total}[/] done", f"{len(self.running)} running",
                     f"{queued} queued", f"[red]{self.failed}[/] failed",
                     f"elapsed {time.monotonic() - self.started:.0f}s", f"ETA {self._eta()}")
        table = Table(show_header=True, header_style="dim", box=None)
        table.add_column("trial")
        table.add_column("phase")
        for label, phase in sorted(self.running.values())[:20]:
            table.add_row(label, phase)
        parts: list[RenderableType] = [head, table]
        if self.waiting:
            task, why = next(iter(self.waiting.items()))
            parts.append(f"[dim]{len(self.waiting)} waiting for admission ({task}: {why})[/]")
        return Group(*parts)

    def plan(self, total: int, already_done: int) -> None:
        with self._lock:
            self.total, self.done = total, already_done
            self._refresh()

    def admission(self, task: Task, why: str | None) -> None:
        with self._lock:
            if why is None:
                self.waiting.pop(task.name, None)
            else:
                if self._live is None and not self._said_waiting:  # plain output: said once
                    print(f"trials wait for admission (the host budget): {task.name}: {why}",
                          file=sys.stderr, flush=True)
                    self._said_waiting = True
                self.waiting[task.name] = why
            self._refresh()

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())

    def phase(self, trial_id: str, label: str, phase: str) -> None:
        with self._lock:
            self.running[trial_id] = (label, phase)
            if self._live is not None:
                self._live.update(self._render())

    def trial_done(self, result: TrialResult, done: int, total: int) -> None:
        with self._lock:
            self.done, self.total = done, total
            self.running.pop(result.trial_id, None)
            if result.failure_mode.value != "none":
                self.failed += 1
            reward = "-" if result.reward is None else f"{result.headline:g}"
            line = (f"[{done}/{total}] {result.task}#{result.attempt}: reward {reward} "
                    f"({result.failure_mode.value})")
            if self._live is not None:
                self._live.console.print(line, highlight=False, markup=False)
                self._live.update(self._render())
            else:
                print(line, file=sys.stderr, flush=True)
