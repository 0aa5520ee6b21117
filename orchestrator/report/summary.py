"""The results table printed at the end of `orchestra run`."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from orchestrator.models import JobResult, StandInRecord, TrialResult, headline_of

COLUMNS = ("task", "attempt", "reward", "failure mode", "agent s", "verify s", "total s")
TIMINGS = ("agent s", "verify s", "total s")


def render_job(job: JobResult, trials: list[TrialResult], console: Console) -> None:
    rows = []
    for r in sorted(trials, key=lambda t: (t.task, t.attempt)):
        reward = "-" if r.reward is None else f"{headline_of(r.reward):g}"
        if r.voided_reward is not None:
            reward = f"void ({headline_of(r.voided_reward):g})"
        rows.append([r.task, str(r.attempt), reward, r.failure_mode.value, f"{r.timings.agent:.2f}",
                     f"{r.timings.verify:.2f}", f"{r.finished_at - r.started_at:.2f}"])
    title = f"job {job.job}  ({job.agent}, k={job.k})"
    if not console.is_terminal:  # piped: plain aligned lines, every task name whole
        _plain(console, title, list(COLUMNS), rows)
    else:  # a terminal: the name is never cut; timing columns go first when it is narrow
        longest = max((len(r[0]) for r in rows), default=4)
        keep = [c for c in COLUMNS if c not in TIMINGS or console.width >= longest + 75]
        table = Table(title=title)
        for column in keep:
            table.add_column(column, justify="right" if column.endswith(" s") else "left",
                             no_wrap=column == "task", overflow="fold")
        for row in rows:
            table.add_row(*(value for column, value in zip(COLUMNS, row, strict=True) if column in keep))
        console.print(table)
    counts = ", ".join(f"{mode}: {n}" for mode, n in sorted(job.counts.items()))
    failed = sum(1 for r in trials if r.failure_mode.value != "none" or r.headline < 1.0)
    errors = sum(1 for r in trials if r.reward is None)
    console.print(f"trials: {job.n_trials}   passed: {job.n_trials - failed}   failed: {failed} "
                  f"(reward below 1: {failed - errors}, no reward: {errors})   mean reward: "
                  f"{job.mean_reward:.3f}   images built: {job.images_built}   ({counts})",
                  markup=False, soft_wrap=True)
    if job.engine_outages:
        console.print(f"note: the engine was gone {job.engine_down_seconds:g} s in "
                      f"{len(job.engine_outages)} outage(s); trials waited for it and those it "
                      f"interrupted were retried without spending their retries ({job.retried} "
                      "trial(s) retried in all)", markup=False, soft_wrap=True)
    if job.memory_shadow:
        console.print(job.memory_shadow.line(), markup=False, soft_wrap=True)
    forgeable = sum(1 for r in trials if r.verifier_forgeable)
    if forgeable:
        static = sum(1 for r in trials if r.verifier_forgeable and (r.verifier_interpreter or "").startswith("static"))
        console.print(f"note: {forgeable} trial(s) graded with verifier_mode shared or snapshot "
                      "(shared is Harbor's default): test.sh ran on the agent's own filesystem, so "
                      f"the agent could influence its grade ({static} of them ran test.sh under the "
                      "host's read-only static bash; what test.sh calls was still the agent's). "
                      "Use environment_mode = \"separate\" where that matters.", markup=False)
    stood: dict[str, StandInRecord] = {}
    for r in trials:
        for entry in r.stand_ins:
            stood.setdefault(entry.reference, entry)
    for ref, entry in sorted(stood.items()):  # what the images were really built on, said plainly
        console.print(f"note: FROM {ref} is not on this engine; built on {entry.stand_in} "
                      f"(python {entry.python}): {entry.reason}"
                      + (f". WARNING: {entry.warning}" if entry.warning else ""),
                      markup=False, highlight=False, soft_wrap=True)
    void = [r for r in trials if r.voided_reward is not None]
    if void:
        console.print(f"void: {len(void)} trial(s) voided by the audit (answer leak) count as "
                      "failed: " + ", ".join(f"{r.task}#{r.attempt}" for r in void), markup=False)
    for r in trials:
        if r.error:
            console.print(f"  [yellow]{r.task}#{r.attempt}[/]: {r.failure_mode.value}: {r.error[:300]}")


def _plain(console: Console, title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i])
              for i in range(len(header))]
    console.print(title, markup=False, highlight=False, soft_wrap=True)
    for line in [header, *rows]:
        console.print("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip(),
                      markup=False, highlight=False, soft_wrap=True)


def render_problems(title: str, problems: list[str], console: Console) -> None:
    console.print(f"[bold red]{title}[/]")
    for problem in problems:
        console.print(f"  - {problem}", markup=False, highlight=False)
