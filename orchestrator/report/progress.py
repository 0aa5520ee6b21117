"""Progress of a running job: a live rich display on a terminal (done / running / queued /
failed by mode, elapsed, trials per minute, ETA, the current phase of each running trial
and why queued trials wait for admission), a plain line per finished trial otherwise or
with --quiet, or with --progress-json one JSON object per finished trial (done, total,
rate, ETA, failures so far by mode) for a pipeline to read."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table

from orchestrator.models import AdmissionWaiting, Observers, PhaseStarted, Planned, TrialFinished


class Progress:
    def __init__(self, console: Console, live: bool | None = None, json_lines: bool = False):
        self.console = console
        self.json_lines = json_lines
        self.live_mode = console.is_terminal and not json_lines if live is None else live
        self.total = 0
        self.done = 0
        self.done_before = 0  # finished by an earlier run of a resumed job: not in the rate
        self.failed = 0
        self.failed_by_mode: Counter[str] = Counter()
        self.started = time.monotonic()
        self.running: dict[str, tuple[str, str]] = {}  # trial id -> (label, phase)
        self.waiting: dict[str, str] = {}  # task name -> why it waits for admission
        self._said_waiting = False
        self._lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> Progress:
        self.started = time.monotonic()  # the rate counts the run, not what came before it
        if self.live_mode:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4,
                              transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._live is not None:
            self._live.__exit__(kind, exc, traceback)

    def rate_per_min(self) -> float | None:
        """Trials finished per minute by this run (None before the first)."""
        here, elapsed = self.done - self.done_before, time.monotonic() - self.started
        return 60 * here / elapsed if here > 0 and elapsed > 0 else None

    def eta_seconds(self) -> float | None:
        rate = self.rate_per_min()
        if rate is None or self.done >= self.total:
            return None
        return 60 * (self.total - self.done) / rate

    def _eta(self) -> str:
        eta = self.eta_seconds()
        return "-" if eta is None else _duration(eta)

    def _failures(self) -> str:
        return ", ".join(f"{mode} {n}" for mode, n in self.failed_by_mode.most_common()) or "none"

    def _render(self) -> Group:
        head = Table.grid(padding=(0, 2))
        queued = max(0, self.total - self.done - len(self.running))
        rate = self.rate_per_min()
        head.add_row(f"[bold]{self.done}/{self.total}[/] done", f"{len(self.running)} running",
                     f"{queued} queued", f"[red]{self.failed}[/] failed",
                     f"elapsed {_duration(time.monotonic() - self.started)}",
                     f"{rate:.1f}/min" if rate else "-/min", f"ETA {self._eta()}")
        if self.failed:
            head.add_row(f"[dim]failures: {self._failures()}[/]")
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

    def observers(self) -> Observers:
        """This view's handlers, for run_job."""
        return (Observers().on(Planned, self.plan).on(PhaseStarted, self.phase)
                .on(AdmissionWaiting, self.admission).on(TrialFinished, self.trial_done))

    def plan(self, event: Planned) -> None:
        with self._lock:
            self.total, self.done, self.done_before = event.total, event.done, event.done
            self._refresh()

    def admission(self, event: AdmissionWaiting) -> None:
        with self._lock:
            if event.why is None:
                self.waiting.pop(event.task, None)
            else:
                if self._live is None and not self._said_waiting:  # plain output: said once
                    print(f"trials wait for admission (the host budget): {event.task}: {event.why}",
                          file=sys.stderr, flush=True)
                    self._said_waiting = True
                self.waiting[event.task] = event.why
            self._refresh()

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())

    def phase(self, event: PhaseStarted) -> None:
        with self._lock:
            self.running[event.trial_id] = (event.label, event.phase)
            if self._live is not None:
                self._live.update(self._render())

    def trial_done(self, event: TrialFinished) -> None:
        result, done, total = event.result, event.done, event.total
        with self._lock:
            self.done, self.total = done, total
            self.running.pop(result.trial_id, None)
            if result.failure_mode.value != "none":
                self.failed += 1
                self.failed_by_mode[result.failure_mode.value] += 1
            if self.json_lines:
                rate, eta = self.rate_per_min(), self.eta_seconds()
                print(json.dumps({
                    "done": done, "total": total, "task": result.task, "attempt": result.attempt,
                    "reward": None if result.reward is None else result.headline,
                    "failure_mode": result.failure_mode.value,
                    "rate_per_min": None if rate is None else round(rate, 2),
                    "eta_seconds": None if eta is None else round(eta),
                    "failed": dict(self.failed_by_mode)}), file=sys.stderr, flush=True)
                return
            reward = "-" if result.reward is None else f"{result.headline:g}"
            line = (f"[{done}/{total}] {result.task}#{result.attempt}: reward {reward} "
                    f"({result.failure_mode.value})")
            if self._live is not None:
                self._live.console.print(line, highlight=False, markup=False)
                self._live.update(self._render())
            else:
                rate = self.rate_per_min()
                print(f"{line}  [{rate or 0:.1f}/min, ETA {self._eta()}, failed: {self._failures()}]",
                      file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    """42s, 6m20s, 2h05m."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
