"""A job's report as Markdown and as one self-contained HTML file (inline SVG plots: reward
per task, phase-time breakdown, and the on/off comparison when a compare*.json exists).

report.html is report/templates/report.html.j2, rendered with autoescape (templating.py):
this module gives it the tables and the plots' geometry; every string from the job folder
(names, errors) is escaped there, bidi controls shown as [U+202E]."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

from orchestrator.models import (
    CompareReport,
    JobResult,
    TrialResult,
    headline_of,
    trial_folder_name,
)
from orchestrator.paths import JobDir, TrialDir
from orchestrator.report.tables import PHASES, Group, JobTables
from orchestrator.report.templating import shown

_IN_A_TRIAL = TrialDir(Path())  # paths relative to a trial's folder
TRIAL_FILES = tuple(p.as_posix() for p in (_IN_A_TRIAL.result, _IN_A_TRIAL.agent_stdout,
                                           _IN_A_TRIAL.verifier_stdout))  # linked per trial
TRIALS = JobDir(Path()).trials.as_posix()  # relative to the job's folder (report.html's)
COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"]


def _rows(groups: list[Group], k: int) -> list[list[str]]:
    rows = []
    for g in groups:
        row = [g.name, str(g.n), f"{g.mean_reward:.3f}", f"{g.passed}/{g.n}"]
        if k > 1:
            row += [f"{g.pass_at_k:.2f}", f"{g.pass_hat_k:.2f}"]
        rows.append(row)
    return rows


def _header(first: str, k: int) -> list[str]:
    return [first, "trials", "mean reward", "passed"] + (["pass@k", "pass^k"] if k > 1 else [])


def sections(job: JobResult, t: JobTables) -> list[tuple[str, list[str], list[list[str]]]]:
    out = [("Per task", _header("task", t.k), _rows(t.by_task, t.k))]
    if any(g.name != "-" for g in t.by_layer):
        out.append(("Per layer", _header("layer", t.k), _rows(t.by_layer, t.k)))
    if any(g.name != "-" for g in t.by_class):
        out.append(("Per class", _header("class", t.k), _rows(t.by_class, t.k)))
    if t.regression_behaviours:
        out.append(("Regression behaviours", ["behaviour", "verdict", "failure mode"],
                    [list(r) for r in t.regression_behaviours]))
    if job.memory_shadow:
        out.append(("Memory shadow", ["metric", "value"], job.memory_shadow.rows()))
    out.append(("Failure modes", ["failure mode", "trials"], [[m, str(n)] for m, n in t.failure_modes.items()]))
    out.append(("Mean phase time (s)", list(PHASES), [[f"{t.phase_means[p]:.3f}" for p in PHASES]]))
    return out


_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]")


def md_cell(text: object) -> str:
    """A string from a job folder (a task name, an error) as one Markdown table cell or
    inline text: `|` escaped, line breaks and other controls shown as \\xNN, so no value can
    end its cell or row and forge another; bidi controls as [U+202E] (templating.shown)."""
    return shown(_CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}",
                              str(text).replace("\\", "\\\\").replace("|", "\\|")))


def _md_code(text: object) -> str:
    """Inline code from a job folder: one line, backticks replaced."""
    return md_cell(text).replace("`", "'")


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(md_cell(c) for c in cells) + " |"


def to_markdown(job: JobResult, t: JobTables, compare: CompareReport | None = None) -> str:
    lines = [f"# Job {md_cell(job.job)}", "",
             f"agent `{_md_code(job.agent)}`, condition `{_md_code(job.condition)}` "
             f"({md_cell(job.condition_hash[:12])}), policy `{_md_code(job.policy)}`, k = {t.k}", "",
             f"- trials: {job.n_trials}, mean reward **{job.mean_reward:.3f}** (errored and void "
             "trials count 0)",
             f"- void (answer leak, counted as failed): {len(job.void)}"
             + (f": {', '.join(md_cell(n) for n in _void_names(job))}" if job.void else ""),
             f"- {md_cell(t.tokens_text)}, {md_cell(t.cost_text)}", f"- images built: {job.images_built}", ""]
    if job.pass_at_k is not None:
        lines.insert(-1, f"- pass@k {job.pass_at_k:.3f}, pass^k {job.pass_hat_k:.3f}")
    for title, header, rows in sections(job, t):
        lines += [f"## {title}", "", _md_row(header), "|" + "---|" * len(header)]
        lines += [_md_row(r) for r in rows] + [""]
    if compare:
        lines += ["## memory-on vs memory-off", "",
                  f"utility delta {compare.utility_delta_pp:+.1f} pp over {compare.paired} pairs, "
                  f"95% CI {compare.ci95[0]:+.1f} .. {compare.ci95[1]:+.1f}, McNemar p = {compare.p_value:.4g}", ""]
    return "\n".join(lines)


def _void_names(job: JobResult) -> list[str]:
    void = set(job.void)
    return [f"{t.task}#{t.attempt}" for t in job.trials if t.trial_id in void]


def _bars(title: str, labels: list[str], values: list[float], vmax: float | None = None) -> dict[str, Any]:
    """A horizontal bar chart's geometry (the template draws it): a bar a label, to vmax."""
    width, bar_h, left = 640, 18, 220
    vmax = vmax or max(values + [1e-9])
    bars = [{"y": 26 + i * bar_h, "label": label[-34:], "value": value,
             "w": 0 if vmax <= 0 else (width - left - 60) * value / vmax}
            for i, (label, value) in enumerate(zip(labels, values, strict=True))]
    return {"title": title, "width": width, "height": 30 + bar_h * len(labels) + 10, "bar_h": bar_h,
            "left": left, "color": COLORS[0], "bars": bars}


def _stacked(title: str, means: dict[str, float]) -> dict[str, Any]:
    """One bar of the phases' mean times, side by side, each its colour and label."""
    width, left, total = 640, 10, sum(means.values()) or 1e-9
    parts, x = [], float(left)
    for i, (phase, value) in enumerate(means.items()):
        w = (width - 2 * left) * value / total
        parts.append({"phase": phase, "value": value, "x": x, "w": w, "label_x": left + i * 88,
                      "color": COLORS[i % len(COLORS)]})
        x += w
    return {"title": title, "width": width, "parts": parts}


def _trial_rows(trials: list[TrialResult]) -> list[dict[str, Any]]:
    """One row per trial, failures first, with the reason and links into its folder (each
    segment percent-encoded: a task name may hold `#`, `?` or `%`)."""
    ordered = sorted(trials, key=lambda r: (r.failure_mode.value == "none" and r.headline >= 1,
                                            r.task, r.attempt))[:2000]
    rows = []
    for r in ordered:
        folder = urllib.parse.quote(trial_folder_name(r.task, r.trial_id), safe="")
        reward = "void" if r.voided_reward is not None else (
            "-" if r.reward is None else f"{headline_of(r.reward):g}")
        links = [(f"{TRIALS}/{folder}/{path}", path.split("/")[-1]) for path in TRIAL_FILES]
        rows.append({"trial": r, "reward": reward, "reason": (r.error or "")[:300], "links": links})
    return rows


def to_html(job: JobResult, t: JobTables, compare: CompareReport | None = None,
            trials: list[TrialResult] | None = None) -> str:
    """report.html (report/templates/report.html.j2): every value escaped by the template."""
    from orchestrator.report.templating import render

    classes = list(compare.per_class) if compare else []
    delta = _bars("memory-on minus memory-off, pass rate (pp) per class", classes,
                  [max(0.0, compare.per_class[c].delta_pp) for c in classes], 100.0) if compare else None
    return render("orchestrator.report", "report.html.j2", job=job, t=t, compare=compare,
                  void=", ".join(_void_names(job)) if job.void else "",
                  rewards=_bars("Mean reward per task", [g.name for g in t.by_task],
                                [g.mean_reward for g in t.by_task], 1.0),
                  phases=_stacked("Mean phase time per trial", t.phase_means), delta=delta,
                  sections=sections(job, t), trials=_trial_rows(trials) if trials else [])
