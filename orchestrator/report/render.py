"""A job's report as Markdown and as one self-contained HTML file (inline SVG plots: reward
per task, phase-time breakdown, and the on/off comparison when a compare*.json exists)."""

from __future__ import annotations

import html

from orchestrator.job.shadow import MemoryShadow
from orchestrator.models.result import JobResult, TrialResult, headline_of
from orchestrator.report.tables import PHASES, Group, JobTables

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
        out.append(("Memory shadow", ["metric", "value"], MemoryShadow.model_validate(job.memory_shadow).rows()))
    out.append(("Failure modes", ["failure mode", "trials"], [[m, str(n)] for m, n in t.failure_modes.items()]))
    out.append(("Mean phase time (s)", list(PHASES), [[f"{t.phase_means[p]:.3f}" for p in PHASES]]))
    return out


def to_markdown(job: JobResult, t: JobTables, compare: dict | None = None) -> str:
    lines = [f"# Job {job.job}", "",
             f"agent `{job.agent}`, condition `{job.condition}` ({job.condition_hash[:12]}), policy "
             f"`{job.policy}`, k = {t.k}", "",
             f"- trials: {job.n_trials}, mean reward **{job.mean_reward:.3f}** (errored and void "
             "trials count 0)",
             f"- void (answer leak, counted as failed): {len(job.void)}"
             + (f": {', '.join(_void_names(job))}" if job.void else ""),
             f"- tokens {t.tokens}, cost {t.cost:.4f}", f"- images built: {job.images_built}", ""]
    if job.pass_at_k is not None:
        lines.insert(-1, f"- pass@k {job.pass_at_k:.3f}, pass^k {job.pass_hat_k:.3f}")
    for title, header, rows in sections(job, t):
        lines += [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    if compare:
        lines += ["## memory-on vs memory-off", "",
                  f"utility delta {compare['utility_delta_pp']:+.1f} pp over {compare['paired']} pairs, "
                  f"95% CI {compare['ci95'][0]:+.1f} .. {compare['ci95'][1]:+.1f}, McNemar p = {compare['p_value']:.4g}", ""]
    return "\n".join(lines)


def _void_names(job: JobResult) -> list[str]:
    void = set(job.void)
    return [f"{t.task}#{t.attempt}" for t in job.trials if t.trial_id in void]


def _bars(title: str, labels: list[str], values: list[float], vmax: float | None = None) -> str:
    width, bar_h, left = 640, 18, 220
    vmax = vmax or max(values + [1e-9])
    height = 30 + bar_h * len(labels) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
             f'<text x="4" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = 26 + i * bar_h
        w = 0 if vmax <= 0 else (width - left - 60) * value / vmax
        parts += [f'<text x="{left - 6}" y="{y + 12}" font-size="11" text-anchor="end">{html.escape(label[-34:])}</text>',
                  f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h - 4}" fill="{COLORS[0]}"/>',
                  f'<text x="{left + w + 4:.1f}" y="{y + 12}" font-size="11">{value:.3g}</text>']
    return "".join(parts) + "</svg>"


def _stacked(title: str, means: dict[str, float]) -> str:
    width, left, total = 640, 10, sum(means.values()) or 1e-9
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="80" role="img">',
             f'<text x="4" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    x = float(left)
    for i, (phase, value) in enumerate(means.items()):
        w = (width - 2 * left) * value / total
        parts.append(f'<rect x="{x:.1f}" y="26" width="{w:.1f}" height="22" fill="{COLORS[i % len(COLORS)]}">'
                     f'<title>{phase}: {value:.3f} s</title></rect>')
        parts.append(f'<text x="{left + i * 88}" y="70" font-size="11" fill="{COLORS[i % len(COLORS)]}">'
                     f'{phase} {value:.2f}s</text>')
        x += w
    return "".join(parts) + "</svg>"


def _trial_rows(trials: list[TrialResult]) -> str:
    """One row per trial, failures first, with the reason and links into its folder."""
    ordered = sorted(trials, key=lambda r: (r.failure_mode.value == "none" and r.headline >= 1,
                                            r.task, r.attempt))[:2000]
    rows = []
    for r in ordered:
        folder = f"trials/{r.task.split('/')[-1]}__{r.trial_id[:12]}"
        reward = "void" if r.voided_reward is not None else (
            "-" if r.reward is None else f"{headline_of(r.reward):g}")
        links = " ".join(f'<a href="{html.escape(folder)}/{p}">{p.split("/")[-1]}</a>'
                         for p in ("result.json", "agent/stdout.txt", "verifier/test-stdout.txt"))
        rows.append(f"<tr><td>{html.escape(r.task)}</td><td>{r.attempt}</td><td>{reward}</td>"
                    f"<td>{html.escape(r.failure_mode.value)}</td>"
                    f"<td>{html.escape((r.error or '')[:300])}</td><td>{links}</td></tr>")
    return ("<h2>Trials</h2><table><tr><th>task</th><th>attempt</th><th>reward</th><th>failure "
            "mode</th><th>reason</th><th>files</th></tr>" + "".join(rows) + "</table>")


def to_html(job: JobResult, t: JobTables, compare: dict | None = None,
            trials: list[TrialResult] | None = None) -> str:
    body = [f"<h1>Job {html.escape(job.job)}</h1>",
            f"<p>agent <code>{html.escape(job.agent)}</code>, condition <code>{html.escape(job.condition)}</code>, "
            f"policy <code>{html.escape(job.policy)}</code>, k = {t.k}; {job.n_trials} trials, mean reward "
            f"<b>{job.mean_reward:.3f}</b>; tokens {t.tokens}, cost {t.cost:.4f}</p>",
            _bars("Mean reward per task", [g.name for g in t.by_task], [g.mean_reward for g in t.by_task], 1.0),
            _stacked("Mean phase time per trial", t.phase_means)]
    if job.void:
        body.insert(2, "<p><b>void (answer leak, counted as failed)</b>: "
                    + html.escape(", ".join(_void_names(job))) + "</p>")
    if compare:
        classes = list(compare["per_class"])
        body.append(_bars("memory-on minus memory-off, pass rate (pp) per class", classes,
                          [max(0.0, compare["per_class"][c]["delta_pp"]) for c in classes], 100.0))
        body.append(f"<p>utility delta <b>{compare['utility_delta_pp']:+.1f} pp</b>, 95% CI "
                    f"{compare['ci95'][0]:+.1f} .. {compare['ci95'][1]:+.1f}, McNemar p = {compare['p_value']:.4g}</p>")
    for title, header, rows in sections(job, t):
        body.append(f"<h2>{html.escape(title)}</h2><table><tr>"
                    + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
                    + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
                    + "</table>")
    if trials:
        body.append(_trial_rows(trials))
    style = ("body{font-family:sans-serif;margin:2em;max-width:960px}table{border-collapse:collapse;margin:.5em 0}"
             "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}th{background:#f4f4f4}")
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>orchestra job "
            f"{html.escape(job.job)}</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n")
