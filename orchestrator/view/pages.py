"""The viewer's pages, server-rendered from the files orchestra writes (DESIGN 1: no second
store of truth). Everything that came from an agent is untrusted: every value goes through
`esc` (HTML-escaped, and bidirectional controls such as U+202E shown as `[U+202E]`, so no
text displays reversed), no page embeds agent text in a script, and files are shown paged.
Names (files an agent made) are shown with every control character visible (`name`), and
every link is built by `href`, one percent-encoded segment at a time: a name with a
newline, `?`, `#` or `%` opens the file it names.

The HTML is in Jinja2 templates (view/templates/), rendered by report/templating.py with
autoescape on and `esc`'s showing of bidi controls for every value printed; a template
shows a name with the `visible` filter. This module gathers each page's values: the jobs,
one job, its running-job banner, one file; the trial page's are in view/trial.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.models import VOID, JobResult, TrialResult, TrialSummary
from orchestrator.paths import JobDir
from orchestrator.report import esc, href, q, visible
from orchestrator.report.templating import render

__all__ = ["esc", "visible", "name", "href", "q", "page", "jobs_page", "load_job", "running_job",
           "job_page", "trial_page", "file_page"]

PAGE_ROWS = 100
FILE_PAGE_BYTES = 64 * 1024
RUNNING_REFRESH_SECONDS = 10


def name(value: object) -> str:
    """A name as it is: escaped, with every control character visible."""
    return esc(visible(str(value)))


def view_page(template: str, title: str, refresh: int | None = None, **values: Any) -> str:
    """One of view/templates/, around its values (base.html.j2: title, nav, style)."""
    return render("orchestrator.view", template, title=title, refresh=refresh, **values)


def page(title: str, body: str, refresh: int | None = None) -> str:
    """A page around `body`, HTML made by our code (server.py's fixed messages, a value in
    them escaped with `esc`). The one place the viewer marks HTML safe."""
    from markupsafe import Markup

    return view_page("base.html.j2", title, refresh, body=Markup(body))  # ours: see above


# ---- jobs ------------------------------------------------------------------------------------
def jobs_page(jobs: dict[str, Path], text: str = "") -> str:
    rows = []
    for job_name, folder in sorted(jobs.items(), key=lambda kv: kv[1].stat().st_mtime, reverse=True):
        job = load_job(folder)
        if job is None:
            continue
        line = f"{job_name} {job.condition} {job.policy} {job.agent}"
        if text and text.lower() not in line.lower():
            continue
        failures = ", ".join(f"{m}: {n}" for m, n in sorted(job.counts.items()) if m != "none")
        rows.append({"name": job_name, "job": job, "failures": failures or "-",
                     "started": _when(job.started_at), "took": job.finished_at - job.started_at})
    return view_page("jobs.html.j2", "jobs", text=text, rows=rows, names=sorted(jobs))


def load_job(folder: Path) -> JobResult | None:
    try:
        return JobResult.model_validate_json(JobDir(folder).result.read_text())
    except (OSError, ValueError):
        return None


def running_job(folder: Path) -> tuple[JobResult, str] | None:
    """A job without result.json yet (running, or stopped before its end): its summary so
    far, made from its finished trials' result.json as the job will make it at the end, and
    its progress for the job page's running-job banner (done of planned, rate, ETA), as
    text. None without a config.json."""
    import time

    from orchestrator.job import JobOptions, summarize
    from orchestrator.models import JobConfig, Manifest

    try:
        config = JobConfig.model_validate_json(JobDir(folder).config.read_text())
        manifest = Manifest.model_validate(config.manifest)
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return None
    trials = []
    for path in JobDir(folder).trial_results():
        try:
            result = TrialResult.model_validate_json(path.read_text())
        except (OSError, ValueError):
            continue  # being written (atomically, so rarely) or damaged: not finished
        if result.finished_at:
            trials.append(result)
    started = min((t.started_at for t in trials if t.started_at), default=0.0)
    options = JobOptions(job_name=config.job, jobs_dir=folder.parent, k=config.k, policy=config.policy)
    agent = trials[0].agent if trials else ""
    job = summarize(options, manifest, agent, trials, 0, started)
    planned = config.trials
    done, last = len(trials), max((t.finished_at or 0.0 for t in trials), default=0.0)
    parts = [f"{done} of {planned if planned is not None else '?'} trial(s) finished"]
    if done >= 2 and last > started:
        rate = done / (last - started) * 60
        parts.append(f"{rate:.1f} per minute")
        if planned is not None and planned > done:
            parts.append(f"about {round((planned - done) / rate)} min left at that rate")
    if last:
        parts.append(f"the last finished {max(0, round(time.time() - last))} s ago")
    return job, "; ".join(parts)


def _when(stamp: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M") if stamp else "-"


# ---- one job ---------------------------------------------------------------------------------
SORTS = {"task": lambda t: (t.task, t.attempt), "reward": lambda t: (t.reward is None, t.reward or 0),
         "mode": lambda t: t.failure_mode.value, "attempt": lambda t: t.attempt}


def job_page(name: str, folder: Path, job: JobResult, params: dict[str, str], banner: str = "") -> str:
    """One job's trials, filtered (mode, class, layer, failed only), sorted, PAGE_ROWS a
    page. `banner`: a running job's progress (running_job's); the page then says the job
    has no result.json yet and reloads itself."""
    trials = _chosen(list(job.trials), params)
    pages = max(1, -(-len(trials) // PAGE_ROWS))
    number = min(max(1, int(params.get("page", "1") or 1)), pages)
    folders = _trial_folders(folder)
    base = href("job", name)
    rows = [_row(t, href("job", name, "trial", folders.get(t.trial_id[:12], "")))
            for t in trials[(number - 1) * PAGE_ROWS: number * PAGE_ROWS]]
    pager = [(n, None if n == number else base + q(**{**params, "page": n}))
             for n in range(1, pages + 1)] if pages > 1 else []
    return view_page(
        "job.html.j2", f"job {name}", RUNNING_REFRESH_SECONDS if banner else None, banner=banner,
        job=job, failed=sum(1 for t in job.trials if _failed(t)),
        counts=", ".join(f"{m}: {n}" for m, n in sorted(job.counts.items())),
        shadow=job.memory_shadow.rows() if job.memory_shadow else [],
        base=base, mode=params.get("mode", ""), cls=params.get("class", ""),
        layer=params.get("layer", ""), failed_only=bool(params.get("failed")),
        sorts=[(key, base + q(**{**params, "sort": key, "page": None})) for key in SORTS],
        total=len(trials), pager=pager, rows=rows)


def _failed(t: TrialSummary) -> bool:
    return t.failure_mode.value != "none" or (t.reward or 0) < 1


def _chosen(trials: list[TrialSummary], params: dict[str, str]) -> list[TrialSummary]:
    """The trials the query asks for, in its order."""
    mode, cls, layer = params.get("mode", ""), params.get("class", ""), params.get("layer", "")
    if params.get("failed"):
        trials = [t for t in trials if _failed(t)]
    if mode:
        trials = [t for t in trials if t.failure_mode.value == mode]
    if cls:
        trials = [t for t in trials if (t.scenario_class or "") == cls]
    if layer:
        trials = [t for t in trials if (t.layer or "") == layer]
    trials.sort(key=SORTS.get(params.get("sort", "task"), SORTS["task"]))
    return trials


def _row(t: TrialSummary, url: str) -> dict[str, Any]:
    void = t.failure_mode in VOID
    return {"url": url, "trial": t,
            "reward": "void" if void else ("-" if t.reward is None else f"{t.reward:g}"),
            "css": "void" if void else ("ok" if (t.reward or 0) >= 1 else "bad")}


def _trial_folders(job_dir: Path) -> dict[str, str]:
    """trial id prefix -> folder name (folders are <task>__<id12>)."""
    return {p.name.rpartition("__")[2]: p.name for p in JobDir(job_dir).trial_folders()}


# ---- one trial -------------------------------------------------------------------------------
def trial_page(job: str, folder: Path) -> str:
    """One trial, failure reason first (view/trial.py, which builds on this module)."""
    from orchestrator.view.trial import trial_page as page_of_trial

    return page_of_trial(job, folder)


# ---- files -----------------------------------------------------------------------------------
def file_page(label: str, path: Path, offset: int) -> str:
    size = path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(max(0, offset))
        chunk = handle.read(FILE_PAGE_BYTES).decode(errors="replace")
    nav = []
    if offset > 0:
        nav.append(("previous", q(offset=max(0, offset - FILE_PAGE_BYTES))))
    if offset + FILE_PAGE_BYTES < size:
        nav.append(("next", q(offset=offset + FILE_PAGE_BYTES)))
    return view_page("file.html.j2", visible(label), size=size, offset=offset, nav=nav, chunk=chunk)
