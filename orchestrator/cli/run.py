"""`orchestra run`, after typer has parsed it: the flags become the API's request
(orchestrator/api/runs.py, which checks them, runs the job and judges it) and the few that only
say how to show the job (Shown); this module shows it: notes and progress while it runs,
then the results table, --json, an answer leak or the gate's verdict, and the exit code.
A refusal raised by the API is printed naming the flag or file (exit 2, or 3 for the host)."""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass, fields
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import typer

from orchestrator.cli.app import configure_logs, err, fail, human_console
from orchestrator.cli.commands import _report_gate
from orchestrator.errors import InfraError, InputError
from orchestrator.paths import JobDir

if TYPE_CHECKING:
    from orchestrator.api import RunOutcome, RunRequest


@dataclass
class Shown:
    """The flags of `orchestra run` that say how to show the job, not which job to run."""

    json_out: str | None = None  # --json: the job result there ('-': stdout)
    quiet: bool = False  # plain progress lines, no live display
    progress_json: bool = False  # progress as JSON lines on stderr
    verbose: bool = False  # events on stderr


def parse(flags: dict[str, Any]) -> tuple[RunRequest, Shown]:
    """typer's parsed flags, by parameter name, as the API's request and the CLI's own."""
    from orchestrator.api import RunRequest

    shown = Shown(**{f.name: flags.pop(f.name) for f in fields(Shown)})
    return RunRequest(**flags), shown


def execute(request: RunRequest, shown: Shown) -> None:
    from orchestrator.api import run
    from orchestrator.report import Progress

    progress = Progress(err, live=False if shown.quiet or shown.verbose or shown.progress_json else None,
                        json_lines=shown.progress_json)
    started: list[Path] = []

    def start(job_dir: Path) -> None:  # checked, loaded, held: the job is about to run
        started.append(job_dir)
        configure_logs(shown.verbose, JobDir(job_dir).events)
        _terminate_as_interrupt()
        live.enter_context(progress)

    try:
        with contextlib.ExitStack() as live:
            outcome = run(request, observers=progress.observers(), notes=_say, on_start=start)
    except (InputError, InfraError) as exc:
        fail(exc)
        return
    except KeyboardInterrupt:
        job_dir = started[0] if started else request.resume or request.jobs_dir / (request.job_name or "")
        err.print(f"[yellow]cancelled[/]: {_cancel_counts(job_dir)}; resume with "
                  f"`orchestra run --resume {job_dir}`", soft_wrap=True)
        raise typer.Exit(130) from None
    _render_and_gate(outcome, shown)


def _say(text: str) -> None:
    """A note from the API, on stderr as written (paths and brackets are not markup)."""
    err.print(text, markup=False, highlight=False, soft_wrap=True)


def _render_and_gate(outcome: RunOutcome, shown: Shown) -> None:
    """The results table, --json, then the exits that judge the job: an answer leak (4),
    a gate with nothing to judge (2), the regression gate (1 with --fail-on-regression)."""
    from orchestrator.api import ANSWER_LEAK
    from orchestrator.report import render_job
    from orchestrator.util import write_output

    human = human_console(shown.json_out)
    render_job(outcome.job, outcome.trials, human)
    human.print(f"job folder: {outcome.job_dir}", soft_wrap=True)
    if shown.json_out:
        write_output(shown.json_out, outcome.job)
    if outcome.exit_code == ANSWER_LEAK:
        leaks = outcome.job.counts.get("answer_leak", 0)
        err.print(f"[bold red]answer leak[/] in {leaks} trial(s): the agent read what grades it (a "
                  "task's tests or solution files, or its memory source files); the suite was "
                  "stopped and its results are void.")
        raise typer.Exit(ANSWER_LEAK)
    if outcome.gate_refused:
        fail(InputError(outcome.gate_refused))
    request = outcome.request
    if outcome.gate is not None and request.baseline is not None:
        _report_gate(outcome.gate, request.baseline, request.fail_on_regression, human)
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)


def _cancel_counts(job_dir: Path) -> str:
    """How a cancelled job ended, from the result.json it wrote on the way out."""
    from orchestrator.models import JobResult

    try:
        job = JobResult.model_validate_json(JobDir(job_dir).result.read_text())
    except (OSError, ValueError):
        return "unfinished trials are marked cancelled"
    cancelled = job.counts.get("cancelled", 0)
    return (f"{job.n_trials - cancelled} of {job.n_trials} trial(s) finished, {cancelled} "
            "cancelled (marked so in the job folder)")


def _terminate_as_interrupt() -> None:
    """SIGTERM cancels like Ctrl-C; a second signal during clean-up is noted, not obeyed."""
    state = {"count": 0}

    def handler(signum: int, frame: FrameType | None) -> None:
        state["count"] += 1
        if state["count"] == 1:
            raise KeyboardInterrupt
        err.print("[yellow]still cleaning up; orchestra removes its containers before it exits[/]")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
