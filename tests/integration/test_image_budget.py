"""--image-budget-gb on the real engine: a job of three tasks, each with an image of its
own, one trial at a time, under a budget of 0 GB: each finished task's images are pruned
while the next runs, no trial loses an image it needs, and nothing else's is touched."""

from __future__ import annotations

import pytest
from conftest import make_task, nothing_left

from orchestrator.host.cleanup import touch_images
from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.events import Observers, PhaseStarted
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import TrialResult
from orchestrator.runtime.base import LABEL_IMAGE_KIND
from orchestrator.tasks.load import load_tasks
from orchestrator.trial.images import ensure_task_images

# the budget prunes orchestra's images engine-wide: another test's image may be among them
pytestmark = pytest.mark.exclusive


def test_a_job_under_an_image_budget_prunes_what_it_no_longer_needs(runtime, tmp_path):
    for i in range(3):  # each trial takes 2 s: a prune (well under 1 s) finishes inside the next
        make_task(tmp_path / "ds", f"budget-{i}", solve="sleep 2\ntouch /app/ok\n",
                  dockerfile=f"FROM python:3.12-slim-bookworm\nRUN echo {i} > /budget-{i}\nWORKDIR /app\n")
    bystander = make_task(tmp_path / "other", "bystander")  # another job's image, used just now
    bystander_images = ensure_task_images(runtime, load_tasks(bystander)[0], "other-job")
    # what earlier tests and sessions left on this engine counts as another job's, in use
    # now: the budget spares it (only this job's images are the test's to prune, and a
    # prune of hundreds of old images would outlast the trials it races)
    touch_images([tag for image in runtime.images_labelled(LABEL_IMAGE_KIND) for tag in image.tags])
    jobs = tmp_path / "jobs"
    seen_while_last_ran: dict[str, bool] = {}

    def image_of(task: str) -> str:  # the agent image a finished trial ran on (its result)
        folder = next((jobs / "image-budget/trials").glob(f"{task}__*"))
        return TrialResult.model_validate_json((folder / "result.json").read_text()).image or ""

    def on_phase(event: PhaseStarted) -> None:
        if event.label.startswith("ds/budget-2") and event.phase == "verify":  # the first task's images by now
            seen_while_last_ran["budget-0"] = runtime.image_exists(image_of("budget-0"))

    options = JobOptions(job_name="image-budget", jobs_dir=jobs, n_concurrent=1,
                         image_budget_gb=0.0, budget_interval=0.0)
    job = run_job(runtime, load_tasks(tmp_path / "ds"), default_manifest("oracle"), options,
                  Observers().on(PhaseStarted, on_phase))
    assert job.counts == {"none": 3} and job.mean_reward == 1.0  # no trial lost its image
    assert seen_while_last_ran == {"budget-0": False}  # pruned while the job still ran
    assert job.images_pruned >= 6  # task and agent image of each of the three
    assert not any(runtime.image_exists(image_of(f"budget-{i}")) for i in range(3))
    assert runtime.image_exists(bystander_images.agent_image)  # another job's, used within the hour
    assert runtime.image_exists("orchestra/base:bookworm")
    assert nothing_left(runtime) == {}
