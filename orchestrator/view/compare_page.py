"""The viewer's compare page: two jobs paired as `orchestra compare` pairs them (report/
compare.py), drawn: the verdict in one sentence, the paired table, per class, and the
utility delta with its 95% CI on an axis, then the memory shadow of each arm."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import InputError
from orchestrator.job.shadow import MemoryShadow
from orchestrator.models.result import TrialSummary
from orchestrator.report.compare import compare, verdict
from orchestrator.view.pages import esc, href, link, load_job, page


def compare_form(names: list[str], a: str = "", b: str = "") -> str:
    def select(field: str, chosen: str) -> str:
        options = "".join(f"<option{' selected' if n == chosen else ''}>{esc(n)}</option>" for n in names)
        return f"<select name='{field}'>{options}</select>"

    return (f"<form action='/compare'>compare {select('a', a)} with {select('b', b)} "
            "<button>compare</button></form>")


def delta_axis(delta: float, low: float, high: float) -> str:
    """-100..+100 pp, the CI as a bar, the delta as a dot, zero marked."""
    width, pad = 600, 20

    def x(v: float) -> float:
        return pad + (width - 2 * pad) * (max(-100.0, min(100.0, v)) + 100) / 200

    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='56' role='img'>"
            f"<line x1='{pad}' y1='30' x2='{width - pad}' y2='30' stroke='#999'/>"
            f"<line x1='{x(0)}' y1='14' x2='{x(0)}' y2='46' stroke='#444'/>"
            f"<rect class='ci' x='{x(low):.1f}' y='24' width='{max(1.0, x(high) - x(low)):.1f}' height='12' "
            f"fill='#4e79a7' opacity='.35'><title>95% CI {low:+.1f} .. {high:+.1f} pp</title></rect>"
            f"<circle cx='{x(delta):.1f}' cy='30' r='5' fill='#4e79a7'/>"
            f"<text x='{pad}' y='54' font-size='11'>-100 pp</text>"
            f"<text x='{x(0) - 4:.1f}' y='12' font-size='11'>0</text>"
            f"<text x='{width - pad - 44}' y='54' font-size='11'>+100 pp</text></svg>")


def compare_page(jobs: dict[str, Path], a: str, b: str) -> tuple[int, str]:
    form = compare_form(sorted(jobs), a, b)
    if a not in jobs or b not in jobs:
        return 404, page("compare", form + "<p class='bad'>choose two jobs that have a result</p>")
    first, second = load_job(jobs[a]), load_job(jobs[b])
    if first is None or second is None:
        return 404, page("compare", form + "<p class='bad'>a job has no result.json yet</p>")
    try:
        report = compare(first, second)
    except InputError as exc:  # the same job twice, or arms that differ in nothing
        return 400, page("compare", form + f"<p class='bad'>{esc(exc)}</p>")
    helpful, harmful = set(report["helpful"]), set(report["harmful"]) | set(report["harmful_without_recall"])
    on_index = {(t.task, t.attempt): t for t in (first if first.job == report["on_job"] else second).trials}
    off_index = {(t.task, t.attempt): t for t in (first if first.job == report["off_job"] else second).trials}
    rows = []
    for key in sorted(set(on_index) & set(off_index)):
        label = f"{key[0]}#{key[1]}"
        if label in report["unpaired"]:
            continue
        on, off = on_index[key], off_index[key]
        mark = "helpful" if label in helpful else ("harmful" if label in harmful else "")
        css = {"helpful": "ok", "harmful": "bad"}.get(mark, "")
        rows.append(f"<tr><td>{esc(key[0])}</td><td>{key[1]}</td><td>{esc(_reward(on))}</td>"
                    f"<td>{esc(_reward(off))}</td><td class='{css}'>{esc(mark)}</td></tr>")
    per_class = "".join(f"<tr><td>{esc(c)}</td><td>{v['n']}</td><td>{v['on']:.2f}</td><td>{v['off']:.2f}</td>"
                        f"<td>{v['delta_pp']:+.1f}</td></tr>" for c, v in report["per_class"].items())
    unpaired = "".join(f"<li>{esc(label)}: {esc(why)}</li>" for label, why in report["unpaired_reasons"].items())
    body = [form, f"<p class='verdict'><b>{esc(verdict(report))}</b></p>",
            f"<p>on: {link(href('job', report['on_job']), report['on_job'])}, off: "
            f"{link(href('job', report['off_job']), report['off_job'])}; the arms differ in "
            f"{esc(', '.join(report['arms_differ_in']))}; {report['paired']} pairs</p>",
            delta_axis(report["utility_delta_pp"], *report["ci95"]),
            f"<p>utility delta {report['utility_delta_pp']:+.1f} pp, 95% CI {report['ci95'][0]:+.1f} .. "
            f"{report['ci95'][1]:+.1f}, exact McNemar p = {report['p_value']:.4g}</p>"]
    if unpaired:
        body.append(f"<h2>Not paired</h2><ul>{unpaired}</ul>")
    if report.get("void_pairs_excluded"):
        body.append("<p>void pairs left out: " + esc(", ".join(report["void_pairs_excluded"])) + "</p>")
    body.append("<h2>Per class</h2><table><tr><th>class</th><th>n</th><th>on</th><th>off</th>"
                f"<th>delta pp</th></tr>{per_class}</table>")
    if report.get("memory_shadow"):
        arms = {arm: MemoryShadow.model_validate(v).rows() if v else None
                for arm, v in report["memory_shadow"].items()}
        metrics = [m for m, _ in next(r for r in arms.values() if r)]
        body.append("<h2>Memory shadow</h2><table><tr><th>metric</th><th>on</th><th>off</th></tr>" + "".join(
            f"<tr><td>{esc(m)}</td>" + "".join(f"<td>{esc(r[i][1] if r else '-')}</td>" for r in (arms['on'], arms['off']))
            + "</tr>" for i, m in enumerate(metrics)) + "</table>")
    body.append("<h2>Pairs</h2><table><tr><th>task</th><th>attempt</th><th>on</th><th>off</th><th></th></tr>"
                + "".join(rows) + "</table>")
    return 200, page(f"compare {report['on_job']} vs {report['off_job']}", "".join(body))


def _reward(trial: TrialSummary) -> str:
    if trial.failure_mode.value == "answer_leak":
        return "void"
    return "-" if trial.reward is None else f"{trial.reward:g}"
