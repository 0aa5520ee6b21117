"""The shipped examples through the whole pipeline on the real engine."""

from __future__ import annotations

from conftest import ROOT, by_task, orchestra_objects, run

EXAMPLES = ROOT / "tasks" / "examples"


def test_oracle_scores_one_and_nop_scores_zero_on_every_example(runtime, tmp_path):
    job, trials = run(runtime, EXAMPLES, tmp_path, agent="oracle", n=3)
    assert len(trials) == 3
    assert {t.task: t.reward["reward"] for t in trials} == {
        "examples/artifact-report": 1.0, "examples/hello-file": 1.0, "examples/multi-metric": 1.0}
    assert all(t.failure_mode == "none" for t in trials)
    assert job.mean_reward == 1.0
    multi = by_task(trials)["multi-metric"]
    assert multi.reward == {"sum": 1.0, "reverse": 1.0, "count": 1.0, "reward": 1.0}

    job, trials = run(runtime, EXAMPLES, tmp_path, agent="nop", n=3)
    assert [t.reward["reward"] for t in trials] == [0.0, 0.0, 0.0]
    assert job.mean_reward == 0.0
    assert orchestra_objects(runtime) == ([], [])


def test_harbor_task_without_environment_mode_is_graded_in_shared_mode(runtime, tmp_path):
    job, trials = run(runtime, EXAMPLES / "hello-file", tmp_path)
    (trial,) = trials
    assert trial.verifier_mode == "shared"
    assert trial.reward == {"reward": 1.0}
    assert trial.base_alias == {"python:3.12-slim-bookworm": "orchestra/base:bookworm"}


def test_a_second_run_of_the_same_tasks_builds_no_image(runtime, tmp_path):
    run(runtime, EXAMPLES, tmp_path, n=3)  # warm (may or may not build)
    job, trials = run(runtime, EXAMPLES, tmp_path, n=3)
    assert job.images_built == 0
    assert all(t.reward["reward"] == 1.0 for t in trials)
