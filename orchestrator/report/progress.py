"""Progress of a running job: a live rich display on a terminal (done / running / failed,
ETA, the current phase of each running trial), plain lines otherwise or with --quiet."""

from __future__ import annotations

import sys
import threading
import time

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table


class Progress:
    def __init__(self, console: Console, live: bool | None = None):
        self.console = console
        self.live_mode = console.is_terminal if live is None else live
        self.total = 0
        self.done = 0
        self.failed = 0
        self.started = time.monotonic()
        self.running: dict[str, tuple[str, str]] = {}  # trial id -> (label, phase)
        self._lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> Progress:
        if self.live_mode:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4,
                              transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def _eta(self) -> str:
        if not self.done or self.done >= self.total:
            return "-"
        rate = (time.monotonic() - self.started) / self.done
        return f"{rate * (self.total - self.done):.0f}s"

    def _render(self):
        head = Table.grid(padding=(0, 2))
        head.add_row(f"[bold]{self.done}/{self.total}[/] done", f"{len(self.running)} running",
                     f"[red]{self.failed}[/] failed", f"ETA {self._eta()}")
        table = Table(show_header=True, header_style="dim", box=None)
        table.add_column("trial")
        table.add_column("phase")
        for label, phase in sorted(self.running.values())[:20]:
            table.add_row(label, phase)
        return Group(head, table)

    def phase(self, trial_id: str, label: str, phase: str) -> None:
        with self._lock:
            self.running[trial_id] = (label, phase)
            if self._live is not None:
                self._live.update(self._render())

    def trial_done(self, result, done: int, total: int) -> None:
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
