"""The viewer's compare page: two jobs paired as `orchestra compare` pairs them (report/
compare.py), drawn (view/templates/compare.html.j2): the verdict in one sentence, the paired
table, per class, and the utility delta with its 95% CI on an axis, then the memory shadow
of each arm. Job and task names are agent data: the template escapes them (pages.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.errors import InputError
from orchestrator.models import CompareReport, JobResult, TrialSummary
from orchestrator.report import verdict
from orchestrator.report.compare import compare
from orchestrator.view.pages import load_job, view_page


def compare_page(jobs: dict[str, Path], a: str, b: str) -> tuple[int, str]:
    """(status, page): 404 without two jobs that have a result, 400 when compare refuses."""

    def refused(status: int, why: object) -> tuple[int, str]:
        return status, view_page("compare.html.j2", "compare", names=sorted(jobs), a=a, b=b, error=why)

    if a not in jobs or b not in jobs:
        return refused(404, "choose two jobs that have a result")
    first, second = load_job(jobs[a]), load_job(jobs[b])
    if first is None or second is None:
        return refused(404, "a job has no result.json yet")
    try:
        report = compare(first, second)
    except InputError as exc:  # the same job twice, or arms that differ in nothing
        return refused(400, exc)
    low, high = report.ci95
    return 200, view_page(
        "compare.html.j2", f"compare {report.on_job} vs {report.off_job}", names=sorted(jobs),
        a=a, b=b, error=None, report=report, verdict=verdict(report), pairs=_pairs(report, first, second),
        axis=delta_axis(report.utility_delta_pp, low, high), shadow=_shadow(report))


def delta_axis(delta: float, low: float, high: float) -> dict[str, Any]:
    """Where the template draws -100..+100 pp: the CI as a bar, the delta as a dot, zero."""
    width, pad = 600, 20

    def x(v: float) -> float:
        return pad + (width - 2 * pad) * (max(-100.0, min(100.0, v)) + 100) / 200

    return {"width": width, "pad": pad, "zero": x(0), "low": low, "high": high, "ci_x": x(low),
            "ci_width": max(1.0, x(high) - x(low)), "dot": x(delta)}


def _pairs(report: CompareReport, first: JobResult, second: JobResult) -> list[dict[str, Any]]:
    """The paired trials, each marked helpful or harmful (or neither), in task order."""
    helpful = set(report.helpful)
    harmful = set(report.harmful) | set(report.harmful_without_recall)
    on_index = {(t.task, t.attempt): t for t in (first if first.job == report.on_job else second).trials}
    off_index = {(t.task, t.attempt): t for t in (first if first.job == report.off_job else second).trials}
    rows = []
    for key in sorted(set(on_index) & set(off_index)):
        label = f"{key[0]}#{key[1]}"
        if label in report.unpaired:
            continue
        mark = "helpful" if label in helpful else ("harmful" if label in harmful else "")
        rows.append({"task": key[0], "attempt": key[1], "on": _reward(on_index[key]),
                     "off": _reward(off_index[key]), "mark": mark,
                     "css": {"helpful": "ok", "harmful": "bad"}.get(mark, "")})
    return rows


def _shadow(report: CompareReport) -> list[tuple[str, str, str]]:
    """(metric, on, off) rows of the arms' memory shadows ('-' for an arm without)."""
    if not report.memory_shadow:
        return []
    arms = {arm: v.rows() if v else None for arm, v in report.memory_shadow.items()}
    metrics = [m for m, _ in next((r for r in arms.values() if r), [])]
    on, off = arms.get("on"), arms.get("off")
    return [(m, on[i][1] if on else "-", off[i][1] if off else "-") for i, m in enumerate(metrics)]


def _reward(trial: TrialSummary) -> str:
    if trial.failure_mode.value == "answer_leak":
        return "void"
    return "-" if trial.reward is None else f"{trial.reward:g}"
