"""Every HTML page (the viewer's jobs, job, trial, file and compare pages, and report.html)
rendered from small hand-made job folders whose every string an agent could have made is
hostile: a `<script>` in the task name, trajectory, verifier output, a file name and the
error comes out escaped on every page, a U+202E shows as `[U+202E]`, and links still
percent-encode odd names (a newline, `?`, `#`, `%`) so that each opens what it names.
No Docker: the folders are written with the result models, as bench/run.py's viewer_10k
does."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import pytest

from orchestrator.job.options import JobOptions
from orchestrator.job.summary import summarize
from orchestrator.models.compare import ClassDelta, CompareReport
from orchestrator.models.evidence import (
    EvidenceIdentity,
    EvidenceTrial,
    RelayEvidence,
    RelayMessage,
)
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import FailureMode, TrialResult
from orchestrator.report.render import to_html
from orchestrator.report.tables import tables
from orchestrator.util import write_json_atomic
from orchestrator.view import pages
from orchestrator.view.compare_page import compare_page
from orchestrator.view.server import ViewServer

SCRIPT = "<script>alert(1)</script>"
RLO = "\u202e"
TASK = f"ds/evil-{SCRIPT}{RLO}"  # a task folder's name is the part after the last '/'
ON = "on-<b onmouseover=alert(1)>"  # a job's name: a folder's, so no '/'
ON_SHOWN = "on-&lt;b onmouseover=alert(1)&gt;"
ODD_NAMES = ["new\nline.txt", "what?.txt", "hash#1.txt", "pct%41.txt", "space name.txt",
             f"{RLO}txt.exe", "<script>x.txt"]


def trial(job: str, policy: str, attempt: int, passed: bool) -> TrialResult:
    return TrialResult(
        trial_id=hashlib.sha256(f"{job}#{attempt}".encode()).hexdigest(), job=job, task=TASK,
        task_path="/t", content_hash="h", condition=f"cond {SCRIPT}", condition_hash="h",
        agent=f"agent {SCRIPT}", policy=policy, attempt=attempt, scenario_class=f"class {SCRIPT}",
        layer="regression", reward={"reward": 1.0 if passed else 0.0},
        failure_mode=FailureMode.NONE if passed else FailureMode.VERIFIER_ERROR,
        error=None if passed else f"error {SCRIPT} {RLO}", agent_outcome=f"ok {SCRIPT}",
        retries=[f"retry {SCRIPT}"], memory={"recall_events": int(policy == "memory-on"),
                                             "markers_used": [f"MARK{SCRIPT}"]},
        started_at=1000.0 + attempt, finished_at=1010.0 + attempt)


def trajectory() -> str:
    records = [
        {"seq": 0, "event": {"kind": "text", "text": f"I will {SCRIPT} with MARK{SCRIPT} {RLO}"}},
        {"seq": 1, "event": {"kind": "tool_call", "tool": {"name": f"sh{SCRIPT}",
                                                           "args": {"cmd": f"echo {SCRIPT}"}}}},
        {"seq": 2, "event": {"kind": "tool_result", "tool": {"name": "sh", "args": "echo",
                                                             "output": f"out {SCRIPT}", "exit_code": 0,
                                                             "err": f"err {SCRIPT}"}}},
        {"memory_recall": {"hits": [{"id": f"fact {SCRIPT}"}], "used_chars": 12, "suppressed": 0,
                           "top1": "a", "shadow": {"top1": "a"}}},
        ["not", "a", "record"],
    ]
    return "".join(json.dumps(r) + "\n" for r in records) + "{not json\n"


def write_trial(job_dir: Path, result: TrialResult) -> Path:
    folder = job_dir / "trials" / f"{result.task.split('/')[-1]}__{result.trial_id[:12]}"
    write_json_atomic(folder / "result.json", result)
    for rel, text in (("agent/instruction.md", f"Do {SCRIPT}"), ("agent/trajectory.jsonl", trajectory()),
                      ("agent/stdout.txt", f"stdout {SCRIPT}"),
                      ("verifier/test-stdout.txt", f"expected 42, found {SCRIPT} {RLO}")):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    said = {"kind": "message", "created_at": 1.0, "pubkey": "p0", "channel_id": "c"}
    evidence = RelayEvidence(
        trial=EvidenceTrial(run_id="j", trial_id=result.trial_id, channel_id="c"), task_name="t",
        identities={f"bot{SCRIPT}": EvidenceIdentity(role="worker", pubkey="p1")}, messages=[
            RelayMessage(id="m1", author=f"alice {SCRIPT}", author_role="asker", content=f"ask {SCRIPT}", **said),
            RelayMessage(id="m2", author="bob", author_role=f"role {SCRIPT}", reply_to_event_id="m1",
                            mentioned_pubkeys=["p1"], content=f"The answer {SCRIPT}", **said)])
    (folder / "artifacts").mkdir()
    (folder / "artifacts/relay-evidence.json").write_text(evidence.model_dump_json())
    for name in ODD_NAMES:
        (folder / "artifacts" / name).write_text(f"{name} {SCRIPT}")
    return folder


def make_job(root: Path, name: str, policy: str, results: list[TrialResult], done: bool = True) -> Path:
    job_dir = root / name
    options = JobOptions(job_name=name, jobs_dir=root, k=len(results), policy=policy)
    manifest = default_manifest("oracle")
    write_json_atomic(job_dir / "config.json", {"job": name, "k": len(results), "policy": policy,
                                                "trials": len(results) + 1,
                                                "manifest": manifest.model_dump(mode="json")})
    for result in results:
        write_trial(job_dir, result)
    if done:
        write_json_atomic(job_dir / "result.json", summarize(options, manifest, results[0].agent,
                                                             results, 0, 1000.0))
    return job_dir


def make_jobs(root: Path) -> dict[str, Path]:
    """Two finished arms of the same task (memory-on and -off, for the compare page), one
    named with a <script>, and a job still running (no result.json)."""
    return {ON: make_job(root, ON, "memory-on", [trial(ON, "memory-on", 0, True),
                                                 trial(ON, "memory-on", 1, False)]),
            "off": make_job(root, "off", "memory-off", [trial("off", "memory-off", 0, False),
                                                        trial("off", "memory-off", 1, False)]),
            "running": make_job(root, "running", "memory-on", [trial("running", "memory-on", 0, True),
                                                               trial("running", "memory-on", 1, True)],
                                done=False)}


@pytest.fixture
def jobs(tmp_path: Path) -> dict[str, Path]:
    return make_jobs(tmp_path)


def assert_escaped(page: str) -> None:
    """No agent markup on the page (the viewer draws no script at all), the agent's text
    there as text; no bidi control left to reverse it."""
    assert "<script" not in page.lower() and "<b onmouseover" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert RLO not in page


def a_trial_folder(job_dir: Path) -> Path:
    return sorted((job_dir / "trials").iterdir())[-1]  # attempt 1, a failed one in every job


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, the link's text)
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = dict(attrs).get("href") or ""
            self.links.append((self._open, ""))

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self.links[-1] = (self.links[-1][0], self.links[-1][1] + data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._open = None


def links_of(page: str) -> list[tuple[str, str]]:
    parser = Links()
    parser.feed(page)
    return parser.links


def test_the_jobs_page_escapes_job_names_and_fields(jobs):
    page = pages.jobs_page(jobs)
    assert_escaped(page)
    assert f"<a href='/job/{urllib.parse.quote(ON, safe='')}'>{ON_SHOWN}</a>" in page
    assert f"<option>{ON_SHOWN}</option>" in page  # the compare form
    filtered = pages.jobs_page(jobs, f"x' onfocus='{SCRIPT}")
    assert "value='x&#39; onfocus=&#39;&lt;script&gt;" in filtered and "<script" not in filtered


def test_the_job_page_escapes_task_names_and_keeps_its_links(jobs):
    name = ON
    job = pages.load_job(jobs[name])
    page = pages.job_page(name, jobs[name], job, {"sort": "reward", "mode": f"'{SCRIPT}"})
    assert_escaped(page)
    assert "value='&#39;&lt;script&gt;alert(1)&lt;/script&gt;'" in page
    page = pages.job_page(name, jobs[name], job, {"sort": "reward"})
    assert_escaped(page)
    assert "evil-&lt;script&gt;alert(1)&lt;/script&gt;[U+202E]" in page
    assert "2 trials, mean reward <b>0.500</b>; failed 1" in page
    base = "/job/" + urllib.parse.quote(name, safe="")
    hrefs = [h for h, _ in links_of(page)]
    assert f"{base}?sort=task" in hrefs and f"{base}?sort=attempt" in hrefs
    folder = a_trial_folder(jobs[name]).name
    assert f"{base}/trial/{urllib.parse.quote(folder, safe='')}" in hrefs
    assert "http-equiv" not in page and "no result.json yet" not in page


def test_a_running_job_has_its_banner_and_reloads(jobs):
    assert pages.load_job(jobs["running"]) is None
    job, banner = pages.running_job(jobs["running"])
    page = pages.job_page("running", jobs["running"], job, {}, banner=banner)
    assert "<meta http-equiv='refresh' content='10'>" in page
    assert "2 of 3 trial(s) finished; 10.9 per minute; about 0 min left at that rate; the last" in page
    assert "no result.json yet</b>: running" in page and "This page reloads every 10 s." in page
    assert page.count("/job/running/trial/") == 2
    assert_escaped(page)


def test_the_trial_page_escapes_every_agent_string(jobs):
    folder = a_trial_folder(jobs["off"])
    page = pages.trial_page("off", folder)
    assert_escaped(page)
    for shown in (f"error {SCRIPT} [U+202E]", f"expected 42, found {SCRIPT} [U+202E]", f"Do {SCRIPT}",
                  f"I will {SCRIPT} with ", f"out {SCRIPT}", f"err {SCRIPT}", f"fact {SCRIPT}",
                  f"alice {SCRIPT}", f"The answer {SCRIPT}", f"retry {SCRIPT}", f"ok {SCRIPT}",
                  f"bot{SCRIPT}", f"echo {SCRIPT}"):
        assert pages.esc(shown) in page, shown
    assert f"<span class='marker'>MARK{pages.esc(SCRIPT)}</span>" in page  # highlighted, escaped
    assert "malformed line 6" in page and "(agree)" in page and "(reply)" in page
    assert page.index("verifier_error") < page.index("Trajectory")  # the reason first


def test_the_trial_page_shows_odd_names_visibly_and_links_them_encoded(jobs):
    folder = a_trial_folder(jobs["off"])
    page = pages.trial_page("off", folder)
    links = dict((text, href) for href, text in links_of(page))
    prefix = f"/file/off/trials/{urllib.parse.quote(folder.name, safe='')}/artifacts/"
    assert links["artifacts/new\\nline.txt"] == prefix + "new%0Aline.txt"
    assert links["artifacts/what?.txt"] == prefix + "what%3F.txt"
    assert links["artifacts/hash#1.txt"] == prefix + "hash%231.txt"
    assert links["artifacts/pct%41.txt"] == prefix + "pct%2541.txt"
    assert links["artifacts/[U+202E]txt.exe"] == prefix + "%E2%80%AEtxt.exe"
    assert links["artifacts/<script>x.txt"] == prefix + "%3Cscript%3Ex.txt"
    assert links["whole file (paged)"].endswith("/verifier/test-stdout.txt")


def test_every_link_of_a_trial_page_opens_what_it_names(jobs):
    """Each link through the server's router (no socket served): 200, and a file link's
    page shows that file."""
    viewer = ViewServer([jobs["off"].parent])
    try:
        page = viewer.route("/job/off/trial/" + urllib.parse.quote(a_trial_folder(jobs["off"]).name))[1]
        files = [(href, text) for href, text in links_of(page) if href.startswith("/file/")]
        assert len(files) >= len(ODD_NAMES) + 3
        for href, text in files:
            status, body = viewer.route(href)
            assert status == 200, href
            if "artifacts/" in text and text != "artifacts/relay-evidence.json":
                name = urllib.parse.unquote(href.rsplit("/", 1)[1])
                assert pages.esc(f"{name} {SCRIPT}") in body and "<script" not in body, name
    finally:
        viewer.httpd.server_close()


def test_the_file_page_escapes_the_file_and_shows_its_name_visibly(jobs):
    path = a_trial_folder(jobs["off"]) / "artifacts" / "new\nline.txt"
    page = pages.file_page(f"off/artifacts/new\nline{SCRIPT}{RLO}.txt", path, 0)
    assert_escaped(page)
    assert "<title>off/artifacts/new\\nline&lt;script&gt;alert(1)&lt;/script&gt;[U+202E].txt</title>" in page
    assert f"<pre>new\nline.txt {pages.esc(SCRIPT)}</pre>" in page
    big = path.parent / "big.txt"
    big.write_text("x" * (pages.FILE_PAGE_BYTES * 2 + 10))
    middle = pages.file_page("big", big, pages.FILE_PAGE_BYTES)
    assert [h for h, _ in links_of(middle)] == ["/", "?offset=0", f"?offset={2 * pages.FILE_PAGE_BYTES}"]


def test_the_compare_page_escapes_job_and_task_names(jobs):
    status, page = compare_page(jobs, "off", ON)
    assert status == 200
    assert_escaped(page)
    assert f"compare {ON_SHOWN} vs off" in page
    assert "evil-&lt;script&gt;alert(1)&lt;/script&gt;[U+202E]" in page and "helpful" in page
    assert f"/job/{urllib.parse.quote(ON, safe='')}" in [h for h, _ in links_of(page)]
    status, page = compare_page(jobs, "off", "off")
    assert status == 400 and "nothing differs" in page and "<script" not in page
    status, page = compare_page(jobs, "off", "running")
    assert status == 404 and "a job has no result.json yet" in page


def test_report_html_escapes_and_links_encoded(jobs):
    job_dir = jobs[ON]
    results = [TrialResult.model_validate_json(p.read_text()) for p in job_dir.glob("trials/*/result.json")]
    job = pages.load_job(job_dir)
    compare = CompareReport(on_job="on", off_job="off", paired=2, on_pass_rate=1.0, off_pass_rate=0.5,
                            per_class={f"class {SCRIPT}": ClassDelta(n=2, on=1.0, off=0.5, delta_pp=50.0)},
                            utility_delta_pp=50.0, ci95=[0.0, 100.0], p_value=1.0)
    page = to_html(job, tables(results), compare, results)
    assert_escaped(page)
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    assert f"<td>{pages.esc(TASK)}</td>".replace(RLO, "[U+202E]") in page
    assert f"error {pages.esc(SCRIPT)} [U+202E]" in page
    folder = urllib.parse.quote(a_trial_folder(job_dir).name, safe="")
    assert f'<a href="trials/{folder}/verifier/test-stdout.txt">test-stdout.txt</a>' in page
    assert re.search(r"<svg [^>]*>.*Mean reward per task", page)


def test_a_page_made_outside_a_template_escapes_its_title(jobs):
    page = pages.page(f"error {SCRIPT}", f"<p>{pages.esc(SCRIPT)}</p>")
    assert_escaped(page)
    assert "<p>&lt;script&gt;" in page and "<h1>error &lt;script&gt;" in page
