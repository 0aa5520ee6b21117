"""The doctor's verdicts from an oracle and a nop trial (issue 25), its leak scan's three
answers (clean, leaky, not scanned) and --skip-broken's cached verdicts, without an engine."""

import hashlib
import json
from types import SimpleNamespace

import pytest
from conftest import make_task

from orchestrator.errors import BuildFailed, RuntimeFault
from orchestrator.job import doctor, leakscan
from orchestrator.job.doctor import classify
from orchestrator.models.result import TrialResult
from orchestrator.runtime.base import ExecResult
from orchestrator.tasks.load import load_task


def trial(reward, mode="none", error=None, stand_ins=()):
    return TrialResult(trial_id="a" * 64, job="j", task="ds/t", task_path="/x", content_hash="h",
                       condition="c", condition_hash="c", agent="oracle", attempt=0,
                       reward=None if reward is None else {"reward": reward}, failure_mode=mode,
                       error=error, stand_ins=list(stand_ins))


def test_verdicts(tmp_path):
    task = load_task(make_task(tmp_path, "t", solve="touch /app/ok\n"))
    job = tmp_path / "job"
    assert classify(task, trial(1.0), trial(0.0), job).verdict == "healthy"
    weak = classify(task, trial(1.0), trial(1.0), job)
    assert (weak.verdict, weak.reason) == ("weak-test", "nop scores 1 without doing anything")
    built = classify(task, trial(None, "build_error", "step 3\nCould not resolve host: github.com"), trial(None), job)
    assert built.verdict == "broken" and "needing a network this host lacks" in built.reason
    stood = classify(task, trial(0.0, stand_ins=[{"reference": "python:3.12.9-slim", "stand_in": "orchestra/base:bookworm",
                                                  "python": "3.11", "release": "bookworm", "reason": "offline"}]),
                      trial(0.0), job)
    assert stood.verdict == "broken" and "stood in by orchestra/base:bookworm (python 3.11)" in stood.reason
    slow = classify(task, trial(None, "agent_timeout"), trial(0.0), job)
    assert slow.verdict == "broken" and "timeout" in slow.reason


def verifier_said(tmp_path, text: str):
    """A task, and the oracle's job folder whose verifier printed `text`."""
    task = load_task(make_task(tmp_path, "t"))
    out = tmp_path / "job" / "trials" / f"t__{'a' * 12}" / "verifier"
    out.mkdir(parents=True)
    (out / "test-stdout.txt").write_text(text)
    return task, tmp_path / "job"


def test_the_verifier_output_names_what_was_missing(tmp_path):
    task, job = verifier_said(tmp_path, "ERROR: ...\n/tests/test.sh: line 4: pytest: command not found\n")
    d = classify(task, trial(0.0), trial(0.0), job)
    assert d.verdict == "broken" and "`pytest` is not in the image" in d.reason


def test_no_solution(tmp_path):
    path = make_task(tmp_path, "t")
    (path / "solution/solve.sh").unlink()
    d = classify(load_task(path), None, trial(0.0), tmp_path)
    assert d.verdict == "no-solution" and d.nop == 0.0


def test_a_missing_test_file_is_named_and_not_taken_for_a_network_error(tmp_path):
    task, job = verifier_said(
        tmp_path, "E   FileNotFoundError: [Errno 2] No such file or directory: '/tests/data/h1.cryo'\n")
    d = classify(task, trial(0.0), trial(0.0), job)
    assert "network" not in d.reason and "the test reads /tests/data/h1.cryo, which the task does not ship" in d.reason


# ---- the leak scan: "not scanned" when it could not look (never leaky, never clean) ------
NO_PYTHON = (b'OCI runtime exec failed: exec failed: unable to start container process: exec: '
             b'"python3": executable file not found in $PATH: unknown')


class ScanEngine:
    """The four calls the leak scan makes, answered as told (no engine)."""

    def __init__(self, answer: ExecResult | None = None, create_fails: bool = False):
        self.answer, self.create_fails, self.removed = answer, create_fails, []

    def create(self, spec):
        if self.create_fails:
            raise RuntimeFault("500 Server Error: no such image")
        return "c1"

    def start(self, container):
        pass

    def exec(self, container, command, **_):
        return self.answer

    def remove(self, container):
        self.removed.append(container)


@pytest.fixture
def built(monkeypatch):
    monkeypatch.setattr(leakscan, "ensure_task_images", lambda *a, **k: SimpleNamespace(task_image="img"))


def report(found=None, future=None, unread=None) -> ExecResult:
    body = {"found": found or {}, "future": future or {}, "unread": unread or []}
    return ExecResult(exit_code=0, timed_out=False, output=b"noise\n" + json.dumps(body).encode())


@pytest.mark.parametrize(("answer", "why"), [
    (ExecResult(127, False, NO_PYTHON), "no python3 in the image"),
    (ExecResult(1, False, b"Traceback (most recent call last):\nMemoryError: out of memory\n"),
     "the scan exited 1: MemoryError: out of memory"),
    (ExecResult(None, True, b""), "the scan did not finish within 300 s"),
    (ExecResult(0, False, b"Segmentation fault\n"), "the scan's output was not its report"),
    (report(future={"/app": "no git in the image"}), "/app/.git's history not read (no git in the image)"),
    (report(unread=["/root/secret"]), "folders not read: /root/secret"),
])
def test_a_scan_that_could_not_look_says_not_scanned_and_why(tmp_path, built, answer, why):
    task = load_task(make_task(tmp_path, "t"))
    engine = ScanEngine(answer)
    scan = leakscan.leak_preflight(engine, task)
    assert (scan.status, scan.leaks) == ("not scanned", []) and why in scan.why
    assert engine.removed == ["c1"]


def test_a_scan_the_engine_or_the_build_failed_says_not_scanned(tmp_path, built, monkeypatch):
    task = load_task(make_task(tmp_path, "t"))
    scan = leakscan.leak_preflight(ScanEngine(create_fails=True), task)
    assert scan.status == "not scanned" and "the engine failed" in scan.why and "no such image" in scan.why

    def unbuilt(*a, **k):
        raise BuildFailed("step 2/3\nE: Unable to locate package nosuch")
    monkeypatch.setattr(leakscan, "ensure_task_images", unbuilt)
    scan = leakscan.leak_preflight(ScanEngine(), task)
    assert scan.status == "not scanned" and "did not build (E: Unable to locate package nosuch)" in scan.why


def test_a_scan_that_looked_says_clean_or_leaky(tmp_path, built):
    task = load_task(make_task(tmp_path, "t", test="echo " + "x" * 80 + "\n"))
    digest = hashlib.sha256((task.path / "tests/test.sh").read_bytes()).hexdigest()
    assert leakscan.leak_preflight(ScanEngine(report(future={"/app": 0})), task).status == "clean"
    leaky = leakscan.leak_preflight(ScanEngine(report({digest: ["/app/test.sh"]}, {"/app": "no git in the image"})), task)
    assert leaky.status == "leaky" and leaky.leaks == ["the image holds tests/test.sh at /app/test.sh"]
    future = leakscan.leak_preflight(ScanEngine(report(future={"/src": 2})), task)
    assert future.leaks == ["/src/.git holds 2 commit(s) past its HEAD (the repository's future)"]


def doctored(tmp_path, monkeypatch, answer: ExecResult, ca_bundle=None):
    """diagnose() over one healthy task whose leak scan answers `answer`."""
    monkeypatch.setenv("ORCHESTRA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(leakscan, "ensure_task_images", lambda *a, **k: SimpleNamespace(task_image="img"))
    task = load_task(make_task(tmp_path / "ds", "t", solve="touch /app/ok\n"))
    monkeypatch.setattr(doctor, "_run", lambda runtime, tasks, agent, *_: {
        task.name: trial(1.0 if agent == "oracle" else 0.0)})
    [found] = doctor.diagnose(ScanEngine(answer), [task], tmp_path / "jobs", ca_bundle=ca_bundle)
    return task, found


def test_an_image_without_python3_is_not_scanned_not_leaky_and_run_keeps_it(tmp_path, monkeypatch):
    task, found = doctored(tmp_path, monkeypatch, ExecResult(127, False, NO_PYTHON))
    assert found.verdict == "not-scanned" and found.leaks == []
    assert found.leak_scan == "not scanned: no python3 in the image"
    assert found.reason == "oracle 1, nop 0; leak scan not done: no python3 in the image"
    plan = doctor.skipped_by_run([task])
    assert plan.keep == [task] and plan.left == [] and plan.unchecked == []
    assert plan.note(tmp_path / "ds") is None


def test_a_clean_scan_is_healthy_and_says_clean(tmp_path, monkeypatch):
    _, found = doctored(tmp_path, monkeypatch, report())
    assert (found.verdict, found.leak_scan, found.reason) == ("healthy", "clean", "oracle 1, nop 0")


def test_the_cache_key_covers_the_ca_bundle(tmp_path, monkeypatch):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    task, found = doctored(tmp_path, monkeypatch, report(), ca_bundle=ca)
    assert doctor.cached(task, ca) == found
    assert doctor.cached(task) is None  # without the bundle the build may fail: not this verdict
    other = tmp_path / "other.pem"
    other.write_text("-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n")
    assert doctor.cached(task, other) is None  # by content, not by path
    assert doctor.skipped_by_run([task], ca).unchecked == []
    assert doctor.skipped_by_run([task]).unchecked == [task]


# ---- --skip-broken on a dataset the doctor never checked --------------------------------
def test_skip_broken_without_verdicts_says_so_and_how_to_make_them(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_CACHE", str(tmp_path / "cache"))
    ds = tmp_path / "ds"
    tasks = [load_task(make_task(ds, name)) for name in ("a", "b")]
    plan = doctor.skipped_by_run(tasks)
    assert plan.keep == tasks and plan.left == [] and plan.unchecked == tasks
    note = plan.note(ds)
    assert note is not None and f"no doctor verdicts exist for {ds}" in note
    assert f"`orchestra tasks doctor {ds}`" in note
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    assert f"`orchestra tasks doctor {ds} --ca-bundle {ca}`" in (plan.note(ds, ca) or "")


def test_skip_broken_names_the_tasks_without_a_verdict(tmp_path, monkeypatch):
    task, _ = doctored(tmp_path, monkeypatch, report())
    new = load_task(make_task(tmp_path / "ds", "new"))
    plan = doctor.skipped_by_run([task, new])
    assert plan.keep == [task, new] and plan.unchecked == [new]
    note = plan.note(tmp_path / "ds") or ""
    assert "1 task(s) have no doctor verdict" in note and new.name in note and "orchestra tasks doctor" in note


def test_a_steps_verifier_output_is_read_and_a_tests_own_words_are_said(tmp_path):
    """Third-party multi-step tasks grade in steps/<name>/verifier/: a DNS failure there is
    the host's missing network; a test's own failure line is quoted when nothing else fits."""
    path = make_task(tmp_path / "ds", "t")
    step = tmp_path / "job" / "trials" / f"t__{'a' * 12}" / "steps" / "one" / "verifier"
    step.mkdir(parents=True)
    (step / "test-stdout.txt").write_text("urllib.error.URLError: <urlopen error [Errno -3] "
                                          "Temporary failure in name resolution>\n")
    d = classify(load_task(path), trial(0.0), trial(0.0), tmp_path / "job")
    assert "needs a network this host lacks (Temporary failure in name resolution)" in d.reason, d.reason
    (step / "test-stdout.txt").write_text("verifier: 1.1.1.1 was blocked despite the 1.1.1.0/24 allowlist\n0\n")
    d = classify(load_task(path), trial(0.0), trial(0.0), tmp_path / "job")
    assert "the test says: verifier: 1.1.1.1 was blocked despite the 1.1.1.0/24 allowlist" in d.reason, d.reason
