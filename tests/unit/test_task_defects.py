"""Defects a task folder carries itself (issue 44): a script run without its run bit, a
step's solution reaching outside its own folder; the doctor names them as the task's."""

import os

from conftest import make_task

from orchestrator.job.doctor import classify
from orchestrator.models.result import TrialResult
from orchestrator.tasks.defects import task_defects
from orchestrator.tasks.load import load_task

HELPER = "#!/bin/bash\ntouch /app/ok\n"


def oracle(reward):
    return TrialResult(trial_id="a" * 64, job="j", task="ds/t", task_path="/x", content_hash="h",
                       condition="c", condition_hash="c", agent="oracle", attempt=0,
                       reward={"reward": reward}, failure_mode="none")


def test_a_script_solve_sh_runs_without_its_run_bit_is_the_tasks_defect(tmp_path):
    task = make_task(tmp_path, "t", solve="cd /solution && ./helper.sh\n", files={"solution/helper.sh": HELPER})
    (found,) = task_defects(load_task(task))
    assert "solution/solve.sh runs ./helper.sh" in found and "solution/helper.sh without its run bit" in found
    d = classify(load_task(task), oracle(0.0), oracle(0.0), tmp_path)
    assert d.verdict == "broken" and "the task's own defect: solution/solve.sh runs ./helper.sh" in d.reason
    os.chmod(task / "solution/helper.sh", 0o755)
    assert task_defects(load_task(task)) == []


def test_a_script_run_through_an_interpreter_or_made_executable_first_is_no_defect(tmp_path):
    bash = make_task(tmp_path, "bash", solve="bash /solution/helper.sh\n", files={"solution/helper.sh": HELPER})
    chmod = make_task(tmp_path, "chmod", solve="chmod +x /solution/helper.sh && /solution/helper.sh\n",
                      files={"solution/helper.sh": HELPER})
    assert task_defects(load_task(bash)) == [] and task_defects(load_task(chmod)) == []


def test_a_dockerfile_run_of_a_copied_script_without_its_run_bit(tmp_path):
    plain = make_task(tmp_path, "plain", files={"environment/setup.sh": HELPER},
                      dockerfile="FROM python:3.12-slim\nCOPY setup.sh /app/\nRUN cd /app && \\\n    /app/setup.sh\n")
    (found,) = task_defects(load_task(plain))
    assert "environment/Dockerfile runs /app/setup.sh" in found and "environment/setup.sh without its run bit" in found
    chmod = make_task(tmp_path, "chmod", files={"environment/setup.sh": HELPER},
                      dockerfile="FROM python:3.12-slim\nCOPY --chmod=755 setup.sh /app/\nRUN /app/setup.sh\n")
    assert task_defects(load_task(chmod)) == []


def test_a_step_solution_that_uses_another_steps_files_is_the_tasks_defect(tmp_path):
    task = make_task(tmp_path, "steps", toml='[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n', files={
        "steps/one/instruction.md": "x\n", "steps/two/instruction.md": "y\n",
        "steps/one/solution/solve.sh": "python3 /solution/make.py\n", "steps/one/solution/make.py": "print(1)\n",
        "steps/two/solution/solve.sh": "python3 /solution/make.py --again\ncat ../../one/solution/make.py\n"})
    whole = load_task(task)
    one, two = (whole.step_view(step) for step in whole.config.steps)
    assert task_defects(one) == []
    found = task_defects(two)
    assert any("uses /solution/make.py, which step 'two' does not ship" in f for f in found), found
    assert any("reaches outside its own folder (../../one/solution/make.py)" in f for f in found), found
    assert task_defects(whole) == found  # the doctor's whole task: each step as Harbor runs it


def test_a_link_out_of_the_task_is_never_read(tmp_path):
    outside = tmp_path / "host-script.sh"
    outside.write_text(HELPER)
    task = make_task(tmp_path / "ds", "t", solve="./helper.sh\n")
    loaded = load_task(task)  # a link out is refused at load now; the doctor holds on its own
    (task / "solution/helper.sh").symlink_to(outside)
    assert task_defects(loaded) == []


def test_a_dockerfile_copy_of_a_file_the_task_does_not_ship(tmp_path):
    task = make_task(tmp_path, "t", files={"environment/data/have.csv": "a\n"},
                     dockerfile="FROM python:3.12-slim\nCOPY data/have.csv /app/\nCOPY data/sample_orbit.csv /app/data/\n"
                                "COPY --from=builder /out /app/\nADD https://example.com/x /app/\nCOPY data/*.csv /app/\n")
    (found,) = task_defects(load_task(task))
    assert "copies data/sample_orbit.csv, which the task does not ship" in found


def test_a_stood_in_base_whose_pull_failed_is_not_taken_for_the_builds_network_need(tmp_path):
    task = make_task(tmp_path, "t", dockerfile="FROM python:3.12-slim\nCOPY data/x.csv /app/\n")
    failed = oracle(0.0).model_copy(update={"reward": None, "failure_mode": "build_error", "error": (
        "COPY failed: file not found in build context: stat data/x.csv: file does not exist\n"
        "[built on: FROM python:3.12-slim stood in by orchestra/base:bookworm (the pull failed: "
        "dial tcp: lookup registry-1.docker.io: no such host)]")})
    d = classify(load_task(task), failed, None, tmp_path)
    assert d.verdict == "broken" and "needing a network" not in d.reason, d.reason
    assert "the task's own defect: environment/Dockerfile copies data/x.csv" in d.reason
