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


def test_the_pruner_counts_a_shared_base_once_on_the_real_engine(runtime):
    """Three task images built on orchestra's base take the base's bytes once on disk: the
    engine's image tree (each image's parent and size) says so, and a budget of exactly
    what orchestra's images take prunes nothing; a byte less prunes the least recently
    used image alone (its own few bytes were all that was over)."""
    import time
    import uuid

    from orchestrator.archive import tar_files
    from orchestrator.host.cleanup import DiskUse, prunable, prune_images

    run = uuid.uuid4().hex[:8]
    mine = [f"orchestra/task/prune-{run}-{i}:h" for i in range(3)]
    for i, tag in enumerate(mine):
        dockerfile = f"FROM orchestra/base:bookworm\nRUN echo {run}-{i} > /mark\nLABEL {LABEL_IMAGE_KIND}=task-image\n"
        runtime.build_image(tar_files({"Dockerfile": dockerfile.encode()}), tag, {}, 300)
        time.sleep(1.1)  # created a second apart: the least recently used is the first
    try:
        tree = runtime.image_tree()
        facts = {t: next(i for i in runtime.images_labelled(LABEL_IMAGE_KIND) if t in i.tags) for t in mine}
        base = runtime.image_facts("orchestra/base:bookworm")
        for image in facts.values():  # built on the base, through the RUN step's image
            assert tree[image.id][0] and tree[tree[image.id][0]][0] == base.id, tree[image.id]
        three = DiskUse(tree, list(facts.values())).total
        summed = sum(i.size for i in facts.values())
        assert base.size < three < base.size + 3 * 2**20, (three, base.size)  # the base once
        assert summed > 3 * base.size  # what the old count took them for
        candidates = prunable(runtime)
        others = frozenset(t for i in candidates for t in i.tags if t not in mine)
        taken = DiskUse(tree, candidates).total
        assert prune_images(runtime, keep_gb=taken / 2**30, keep=others) == []
        assert all(runtime.image_exists(t) for t in mine)
        would = prune_images(runtime, keep_gb=(taken - 1) / 2**30, keep=others, dry_run=True)
        assert [i.tags for i in would] == [[mine[0]]] and runtime.image_exists(mine[0])  # said, not done
        removed = prune_images(runtime, keep_gb=(taken - 1) / 2**30, keep=others)
        assert [i.tags for i in removed] == [[mine[0]]]
        assert runtime.image_exists(mine[1]) and runtime.image_exists(mine[2])
    finally:
        for tag in mine:
            runtime.remove_image(tag)
