"""The viewer's pages, server-rendered from the files orchestra writes (DESIGN 1: no second
store of truth). Everything that came from an agent is untrusted: every value goes through
`esc` (html.escape, and bidirectional controls such as U+202E shown as `[U+202E]`, so no
text displays reversed), no page embeds agent text in a script, and files are shown paged.
Names (files an agent made) are shown with every control character visible (`name`), and
every link is built by `href`, one percent-encoded segment at a time: a name with a
newline, `?`, `#` or `%` opens the file it names.
"""

from __future__ import annotations

import html
import json
import re
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from orchestrator.job.shadow import MemoryShadow
from orchestrator.models.result import ERRORED, VOID, JobResult, TrialResult, headline_of

PAGE_ROWS = 100
FILE_PAGE_BYTES = 64 * 1024
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:3px 6px;
text-align:left;vertical-align:top}th a{color:inherit}pre{background:#f6f6f6;padding:8px;
overflow:auto;max-height:480px;white-space:pre-wrap;word-break:break-all}.bad{color:#b00020}
.ok{color:#1b7f3b}.void{color:#8a5a00}.why{border-left:4px solid #b00020;padding:6px 12px;
background:#fff5f5}.turn{border-left:3px solid #ccc;margin:6px 0;padding:2px 10px}
.tool{border-color:#4a7bd0}.recall{border-color:#8a5a00}.marker{background:#ffe58a}
.msg{margin:6px 0 6px calc(var(--depth,0)*24px);border-left:3px solid #999;padding:2px 10px}
nav a{margin-right:1em}
"""


BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
CONTROL = re.compile("[\x00-\x1f\x7f]")


def _code_point(match: re.Match) -> str:
    return f"[U+{ord(match.group()):04X}]"


def esc(value: object) -> str:
    text = html.escape("" if value is None else str(value), quote=True)
    return BIDI.sub(_code_point, text)


def visible(text: str) -> str:
    """Every control character (a newline too) as its escape: `\\n`, `\\x1b`."""
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def name(value: object) -> str:
    """A name as it is: escaped, with every control character visible."""
    return esc(visible(str(value)))


def href(*segments: str) -> str:
    """An absolute path from raw segments, each percent-encoded whole ('/' included)."""
    return "/" + "/".join(urllib.parse.quote(str(seg), safe="") for seg in segments)


def page(title: str, body: str, refresh: int | None = None) -> str:
    reload = f"<meta http-equiv='refresh' content='{refresh}'>" if refresh else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'>{reload}<title>{esc(title)}</title>"
            f"<style>{STYLE}</style></head><body><nav><a href='/'>jobs</a></nav>"
            f"<h1>{esc(title)}</h1>{body}</body></html>")


def link(url: str, text: object, shown: Callable[[object], str] = esc) -> str:
    return f"<a href='{esc(url)}'>{shown(text)}</a>"


def q(**params: object) -> str:
    return "?" + urllib.parse.urlencode({k: v for k, v in params.items() if v not in (None, "")})


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
        rows.append(
            f"<tr><td>{link(href('job', job_name), job_name)}</td>"
            f"<td>{esc(job.condition)}</td><td>{esc(job.policy)}</td><td>{esc(job.agent)}</td>"
            f"<td>{job.k}</td><td>{job.n_trials}</td><td>{job.mean_reward:.3f}</td>"
            f"<td>{esc(failures or '-')}</td><td>{_when(job.started_at)}</td>"
            f"<td>{job.finished_at - job.started_at:.1f} s</td></tr>")
    form = (f"<form><input name='q' value='{esc(text)}' placeholder='filter'> "
            "<button>filter</button></form>")
    head = ("<tr><th>job</th><th>condition</th><th>policy</th><th>agent</th><th>k</th>"
            "<th>trials</th><th>mean reward</th><th>failures</th><th>started</th><th>took</th></tr>")
    from orchestrator.view.compare_page import compare_form

    return page("jobs", form + f"<table>{head}{''.join(rows)}</table>" + compare_form(sorted(jobs)))


def load_job(folder: Path) -> JobResult | None:
    try:
        return JobResult.model_validate_json((folder / "result.json").read_text())
    except (OSError, ValueError):
        return None


RUNNING_REFRESH_SECONDS = 10


def running_job(folder: Path) -> tuple[JobResult, str] | None:
    """A job without result.json yet (running, or stopped before its end): its summary so
    far, made from its finished trials' result.json as the job will make it at the end, and
    a banner with its progress (done of planned, rate, ETA). None without a config.json."""
    import time

    from orchestrator.job.options import JobOptions
    from orchestrator.job.summary import summarize
    from orchestrator.models.manifest import Manifest

    try:
        config = json.loads((folder / "config.json").read_text())
        manifest = Manifest.model_validate(config["manifest"])
    except (OSError, ValueError, KeyError):
        return None
    trials = []
    for path in (folder / "trials").glob("*/result.json"):
        try:
            result = TrialResult.model_validate_json(path.read_text())
        except (OSError, ValueError):
            continue  # being written (atomically, so rarely) or damaged: not finished
        if result.finished_at:
            trials.append(result)
    started = min((t.started_at for t in trials if t.started_at), default=0.0)
    options = JobOptions(job_name=str(config.get("job", folder.name)), jobs_dir=folder.parent,
                         k=config.get("k"), policy=str(config.get("policy", "memory-on")))
    agent = trials[0].agent if trials else ""
    job = summarize(options, manifest, agent, trials, 0, started)
    planned = config.get("trials")
    done, last = len(trials), max((t.finished_at or 0.0 for t in trials), default=0.0)
    parts = [f"{done} of {planned if planned is not None else '?'} trial(s) finished"]
    if done >= 2 and last > started:
        rate = done / (last - started) * 60
        parts.append(f"{rate:.1f} per minute")
        if isinstance(planned, int) and planned > done:
            parts.append(f"about {round((planned - done) / rate)} min left at that rate")
    if last:
        parts.append(f"the last finished {max(0, round(time.time() - last))} s ago")
    banner = (f"<p class='running'><b>no result.json yet</b>: running, or stopped before its end "
              f"(then <code>orchestra run --resume</code> finishes it). {esc('; '.join(parts))}. "
              f"This page reloads every {RUNNING_REFRESH_SECONDS} s.</p>")
    return job, banner


def _when(stamp: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M") if stamp else "-"


# ---- one job ---------------------------------------------------------------------------------
SORTS = {"task": lambda t: (t.task, t.attempt), "reward": lambda t: (t.reward is None, t.reward or 0),
         "mode": lambda t: t.failure_mode.value, "attempt": lambda t: t.attempt}


def job_page(name: str, folder: Path, job: JobResult, params: dict[str, str], banner: str = "") -> str:
    trials = list(job.trials)
    mode, cls, layer = params.get("mode", ""), params.get("class", ""), params.get("layer", "")
    if params.get("failed"):
        trials = [t for t in trials if t.failure_mode.value != "none" or (t.reward or 0) < 1]
    if mode:
        trials = [t for t in trials if t.failure_mode.value == mode]
    if cls:
        trials = [t for t in trials if (t.scenario_class or "") == cls]
    if layer:
        trials = [t for t in trials if (t.layer or "") == layer]
    trials.sort(key=SORTS.get(params.get("sort", "task"), SORTS["task"]))
    pages = max(1, -(-len(trials) // PAGE_ROWS))
    number = min(max(1, int(params.get("page", "1") or 1)), pages)
    shown = trials[(number - 1) * PAGE_ROWS: number * PAGE_ROWS]
    folders = _trial_folders(folder)
    base = href("job", name)
    rows = []
    for t in shown:
        trial_url = href("job", name, "trial", folders.get(t.trial_id[:12], ""))
        reward = "void" if t.failure_mode in VOID else ("-" if t.reward is None else f"{t.reward:g}")
        css = "void" if t.failure_mode in VOID else ("ok" if (t.reward or 0) >= 1 else "bad")
        rows.append(f"<tr><td>{link(trial_url, t.task)}</td><td>{t.attempt}</td>"
                    f"<td class='{css}'>{esc(reward)}</td><td>{esc(t.failure_mode.value)}</td>"
                    f"<td>{esc(t.scenario_class or '')}</td><td>{esc(t.layer or '')}</td>"
                    f"<td>{t.retries}</td></tr>")
    counts = ", ".join(f"{m}: {n}" for m, n in sorted(job.counts.items()))
    failed = sum(1 for t in job.trials if t.failure_mode.value != "none" or (t.reward or 0) < 1)
    summary = (f"<p>condition <code>{esc(job.condition)}</code>, policy <code>{esc(job.policy)}"
               f"</code>, agent <code>{esc(job.agent)}</code>, k = {job.k}; {job.n_trials} trials, "
               f"mean reward <b>{job.mean_reward:.3f}</b>; failed {failed} (reward below 1 or an "
               f"error); by mode: {esc(counts)}; void: {len(job.void)}</p>")
    filters = (f"<form action='{esc(base)}'>mode <input name='mode' value='{esc(mode)}' size=12> "
               f"class <input name='class' value='{esc(cls)}' size=10> layer <input name='layer' "
               f"value='{esc(layer)}' size=10> <label><input type='checkbox' name='failed' value='1'"
               f"{' checked' if params.get('failed') else ''}> failed only</label> <button>show</button></form>")
    sorts = " ".join(link(base + q(**{**params, "sort": key, "page": None}), key) for key in SORTS)
    pager = " ".join(link(base + q(**{**params, "page": n}), n) if n != number else f"<b>{n}</b>"
                     for n in range(1, pages + 1)) if pages > 1 else ""
    head = ("<tr><th>task</th><th>attempt</th><th>reward</th><th>failure mode</th><th>class</th>"
            "<th>layer</th><th>retries</th></tr>")
    if job.memory_shadow:
        summary += "<h2>Memory shadow</h2><table>" + "".join(
            f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>"
            for k, v in MemoryShadow.model_validate(job.memory_shadow).rows()) + "</table>"
    return page(f"job {name}", banner + summary + filters + f"<p>sort: {sorts}</p><p>{len(trials)} trial(s)"
                f" {pager}</p><table>{head}{''.join(rows)}</table>",
                refresh=RUNNING_REFRESH_SECONDS if banner else None)


def _trial_folders(job_dir: Path) -> dict[str, str]:
    """trial id prefix -> folder name (folders are <task>__<id12>)."""
    trials = job_dir / "trials"
    if not trials.is_dir():
        return {}
    return {p.name.rpartition("__")[2]: p.name for p in trials.iterdir()}


# ---- one trial -------------------------------------------------------------------------------
def trial_page(job: str, folder: Path) -> str:
    result = TrialResult.model_validate_json((folder / "result.json").read_text())

    def file_link(relative: Path | str, text: object) -> str:  # the file route resolves from the job folder
        return link(href("file", job, "trials", folder.name, *Path(relative).parts), text, shown=name)

    parts = [_why(result, folder)]
    parts.append(_section("Instruction", f"<pre>{esc(_head(folder / 'agent/instruction.md'))}</pre>"))
    parts.append(_section("Trajectory", _trajectory(folder / "agent/trajectory.jsonl",
                                                      result.memory.get("markers_used", []))))
    evidence = folder / "artifacts/relay-evidence.json"
    if evidence.is_file():
        parts.append(_section("Relay evidence", _evidence(evidence)))
    for label, rel in (("Agent stdout", "agent/stdout.txt"), ("Agent stderr", "agent/stderr.txt"),
                       ("Verifier output", "verifier/test-stdout.txt")):
        path = folder / rel
        if path.is_file():
            parts.append(_section(label, f"<pre>{esc(_tail(path))}</pre>"
                                  f"<p>{file_link(rel, 'whole file (paged)')}</p>"))
    parts.append(_section("Reward", f"<pre>{esc(json.dumps(result.reward, indent=1))}</pre>"))
    timeline = " · ".join(f"{k} {v:.2f}s" for k, v in result.timings.model_dump().items())
    parts.append(_section("Phases", f"<p>{esc(timeline)}</p>"))
    parts.append(_section("Limits applied", f"<pre>{esc(result.limits.model_dump_json(indent=1))}</pre>"))
    if result.retries:
        parts.append(_section("Retries", "<ul>" + "".join(f"<li>{esc(r)}</li>" for r in result.retries)
                              + "</ul>"))
    parts.append(_section("Memory audit", f"<pre>{esc(json.dumps(result.memory, indent=1)[:20000])}</pre>"))
    if result.model:
        parts.append(_section("Model usage", f"<pre>{esc(json.dumps(result.model, indent=1))}</pre>"
                              f"<p>tokens {result.tokens}, cost {result.cost}</p>"))
    listing = "".join(f"<li>{file_link(p.relative_to(folder), p.relative_to(folder))}</li>"
                      for p in sorted(folder.rglob('*'))[:500] if p.is_file())
    parts.append(_section("Files", f"<ul>{listing}</ul>"))
    return page(f"{result.task} #{result.attempt}", "".join(parts))


def _section(title: str, body: str) -> str:
    return f"<h2>{esc(title)}</h2>{body}"


def _why(result: TrialResult, folder: Path) -> str:
    if result.failure_mode.value == "none" and headline_of(result.reward or {}) >= 1:
        return f"<p class='ok'>passed: reward {esc(result.reward)}</p>"
    mode = result.failure_mode.value
    kind = "void" if result.failure_mode in VOID else ("error" if result.failure_mode in ERRORED
                                                       else "failed")
    tail = folder / "verifier/test-stdout.txt"
    verifier = f"<pre>{esc(_tail(tail, 4000))}</pre>" if tail.is_file() else ""
    return (f"<div class='why'><p><b>{esc(kind)}</b>: failure mode <b>{esc(mode)}</b>, reward "
            f"{esc(result.reward if result.reward is not None else result.voided_reward)}, "
            f"agent outcome {esc(result.agent_outcome)}</p><p>{esc(result.error or '')}</p>"
            f"{verifier}</div>")


def _head(path: Path, limit: int = FILE_PAGE_BYTES) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, limit: int = 8000) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return ("... " if size > limit else "") + handle.read().decode(errors="replace")
    except OSError:
        return ""


def _marked(text: str, markers: list[str]) -> str:
    out = esc(text)
    for marker in markers:
        out = out.replace(esc(marker), f"<span class='marker'>{esc(marker)}</span>")
    return out


def _trajectory(path: Path, markers: list[str], limit: int = 500) -> str:
    if not path.is_file():
        return "<p>no trajectory written</p>"
    turns = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle):
            if number >= limit:
                turns.append(f"<p>... (first {limit} records shown)</p>")
                break
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # agent data: any JSON, or none
                turns.append(f"<div class='turn bad'>malformed line {number + 1}</div>")
                continue
            if not isinstance(record, dict):
                continue
            recall = record.get("memory_recall")
            if isinstance(recall, dict):
                hits = ", ".join(str(h.get("id")) for h in recall.get("hits") or [] if isinstance(h, dict))
                shadow = recall.get("shadow") if isinstance(recall.get("shadow"), dict) else None
                agree = (f"; top-1 {esc(recall.get('top1'))}, V2 shadow {esc(shadow.get('top1'))}"
                         f"{' (agree)' if recall.get('top1') == shadow.get('top1') else ' (differ)'}"
                         if shadow else "")
                turns.append(f"<div class='turn recall'>memory recall: hits {esc(hits or 'none')}; "
                             f"{esc(recall.get('used_chars'))} chars, {esc(recall.get('suppressed'))} suppressed"
                             f"{agree}</div>")
                continue
            event = record.get("event")
            if not isinstance(event, dict):
                event = {}
            tool = event.get("tool") if isinstance(event.get("tool"), dict) else None
            if tool is not None:
                args = tool.get("args")
                args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                body = f"<b>{esc(event.get('kind'))}</b> <code>{esc(tool.get('name'))}</code> <pre>{_marked(args, markers)}</pre>"
                if event.get("kind") == "tool_result":
                    body += f"<pre>{_marked(str(tool.get('output') or '')[:4000], markers)}</pre>"
                    body += f"<p>exit {esc(tool.get('exit_code'))} {esc(tool.get('err') or '')}</p>"
                turns.append(f"<div class='turn tool'>{body}</div>")
            else:
                turns.append(f"<div class='turn'><b>{esc(event.get('kind'))}</b> "
                             f"{_marked(str(event.get('text') or ''), markers)}</div>")
    return "".join(turns)


def _evidence(path: Path) -> str:
    try:
        data = json.loads(path.read_text(errors="replace"))
        messages = [m for m in data.get("messages") or [] if isinstance(m, dict)]
    except (OSError, ValueError, AttributeError):
        return "<p class='bad'>relay-evidence.json is unreadable</p>"
    by_id = {m.get("id"): m for m in messages}
    names = {v.get("pubkey"): k for k, v in (data.get("identities") or {}).items() if isinstance(v, dict)}

    def depth(message: dict) -> int:
        d, seen = 0, set()
        while message.get("reply_to_event_id") in by_id and d < 8 and message.get("id") not in seen:
            seen.add(message.get("id"))
            message = by_id[message["reply_to_event_id"]]
            d += 1
        return d

    out = []
    for m in messages[:1000]:
        mentions = ", ".join(names.get(p, str(p)[:8]) for p in m.get("mentioned_pubkeys") or [])
        reply = " (reply)" if m.get("reply_to_event_id") else ""
        out.append(f"<div class='msg' style='--depth:{depth(m)}'><b>{esc(m.get('author'))}</b> "
                   f"<i>{esc(m.get('author_role'))}</i>{reply}"
                   f"{' → ' + esc(mentions) if mentions else ''}<pre>{esc(m.get('content'))}</pre></div>")
    return "".join(out) or "<p>no messages</p>"


# ---- files -----------------------------------------------------------------------------------
def file_page(label: str, path: Path, offset: int) -> str:
    size = path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(max(0, offset))
        chunk = handle.read(FILE_PAGE_BYTES).decode(errors="replace")
    nav = []
    if offset > 0:
        nav.append(link(q(offset=max(0, offset - FILE_PAGE_BYTES)), "previous"))
    if offset + FILE_PAGE_BYTES < size:
        nav.append(link(q(offset=offset + FILE_PAGE_BYTES), "next"))
    return page(visible(label), f"<p>{size} bytes, from {offset} {' '.join(nav)}</p><pre>{esc(chunk)}</pre>")
