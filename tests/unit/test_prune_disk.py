"""`cleanup --images --keep-gb` and `--image-budget-gb` count what orchestra's images take on
disk: a base many task images were built on is counted once, not once per image (issue
found on 2026-12-07: 80 task images on one 226 MB base read as ~20 GB where the engine held
5.5 GB, and `--keep-gb 20` pruned 25 images it did not need to)."""

from __future__ import annotations

import pytest

from orchestrator.host import cleanup
from orchestrator.host.cleanup import DiskUse, prune_images
from orchestrator.runtime.base import LABEL_IMAGE_KIND
from orchestrator.runtime.fake import FakeRuntime

MB = 2**20
GB = 2**30


@pytest.fixture(autouse=True)
def no_usage_record(tmp_path, monkeypatch):
    monkeypatch.setattr(cleanup, "USAGE_FILE", tmp_path / "usage.json")  # no host record read


def _engine(n: int) -> tuple[FakeRuntime, str]:
    """A base of 900 MB and n task images on it, each 100 MB of its own, the task image
    built through an intermediate step (as the classic builder leaves them)."""
    rt = FakeRuntime()
    base = rt.add_image("orchestra/base:bookworm", size=900 * MB, labels={LABEL_IMAGE_KIND: "base"})
    for i in range(n):
        step = rt.add_image(f"<step-{i}>", size=950 * MB, parent=base)
        rt.add_image(f"orchestra/task/t{i}:h", size=1000 * MB, parent=step,
                     labels={LABEL_IMAGE_KIND: "task-image"})
    return rt, base


def test_a_shared_base_counts_once():
    rt, _ = _engine(10)
    task_images = rt.images_labelled(f"{LABEL_IMAGE_KIND}=task-image")
    use = DiskUse(rt.image_tree(), task_images)
    assert use.total == 900 * MB + 10 * 100 * MB  # not 10 x 1000 MB
    use.forget(task_images[0])
    assert use.total == 900 * MB + 9 * 100 * MB  # its own 100 MB freed, the base still used
    for image in task_images[1:]:
        use.forget(image)
    assert use.total == 0  # the last one frees the base's bytes from the count too


def test_a_budget_above_the_disk_used_prunes_nothing_and_below_it_prunes_least_recent_first():
    rt, _ = _engine(10)  # 1.9 GB on disk, 10 GB by the images' summed sizes
    assert prune_images(rt, keep_gb=2.0) == []
    removed = prune_images(rt, keep_gb=1.5)  # 1,900 MB -> at most 1,536 MB: four of 100 MB
    assert len(removed) == 4
    assert sorted(t for image in removed for t in image.tags) == [f"orchestra/task/t{i}:h" for i in range(4)]
    assert "orchestra/base:bookworm" in rt.images  # never a candidate


def test_an_image_whose_parent_the_engine_no_longer_lists_counts_whole():
    rt = FakeRuntime()
    rt.add_image("orchestra/task/lone:h", size=700 * MB, parent="sha256:" + "f" * 64,
                 labels={LABEL_IMAGE_KIND: "task-image"})
    use = DiskUse(rt.image_tree(), rt.images_labelled(LABEL_IMAGE_KIND))
    assert use.total == 700 * MB


def test_a_dry_run_names_what_the_prune_would_remove_and_removes_nothing():
    rt, _ = _engine(10)
    before = set(rt.images)
    would = prune_images(rt, keep_gb=1.5, dry_run=True)
    assert [t for image in would for t in image.tags] == [f"orchestra/task/t{i}:h" for i in range(4)]
    assert set(rt.images) == before and "remove_image" not in rt.calls
    assert [i.tags for i in prune_images(rt, keep_gb=1.5)] == [i.tags for i in would]  # as said
