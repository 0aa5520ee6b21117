"""The doctor's verdicts from an oracle and a nop trial (issue 25), without an engine."""

from conftest import make_task

from orchestrator.job.doctor import classify
from orchestrator.models.result import TrialResult
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
                                                  "python": "3.11"}]), trial(0.0), job)
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
