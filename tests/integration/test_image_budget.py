"""--image-budget-gb on the real engine: a job of three tasks, each with an image of its
own, one trial at a time, under a budget of 0 GB: each finished task's images are pruned
while the next runs, no trial loses an image it needs, and nothing else's is touched."""

from __future__ import annotations

from conftest import make_task, nothing_left

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.tasks.load import load_tasks
from orchestrator.trial.images import ensure_task_images


def test_a_job_under_an_image_budget_prunes_what_it_no_longer_needs(runtime, tmp_path):
    for i in range(3):
        make_task(tmp_path / "ds", f"budget-{i}", solve="touch /app/ok\n",
                  dockerfile=f"FROM python:3.12-slim-bookworm\nRUN echo {i} > /budget-{i}\nWORKDIR /app\n")
    bystander = make_task(tmp_path / "other", "bystander")  # another job's image, used just now
    bystander_images = ensure_task_images(runtime, load_tasks(bystander)[0], "other-job")
    tasks = load_tasks(tmp_path / "ds")
    seen_while_last_ran: dict[str, bool] = {}

    def on_phase(_trial: str, label: str, phase: str) -> None:
        if label.startswith("ds/budget-2") and phase == "agent":  # the first task's images by now
            seen_while_last_ran["budget-0"] = runtime.image_exists(images_of["ds/budget-0"])

    images_of = {t.name: ensure_task_images(runtime, t, "probe").agent_image for t in tasks}
    options = JobOptions(job_name="image-budget", jobs_dir=tmp_path / "jobs", n_concurrent=1,
                         image_budget_gb=0.0, budget_interval=0.0)
    job = run_job(runtime, tasks, default_manifest("oracle"), options, on_phase=on_phase)
    assert job.counts == {"none": 3} and job.mean_reward == 1.0  # no trial lost its image
    assert seen_while_last_ran == {"budget-0": False}  # pruned while the job still ran
    assert job.images_pruned >= 6  # task and agent image of each of the three
    assert not any(runtime.image_exists(ref) for ref in images_of.values())
    assert runtime.image_exists(bystander_images.agent_image)  # another job's, used within the hour
    assert runtime.image_exists("orchestra/base:bookworm")
    assert nothing_left(runtime) == {}
