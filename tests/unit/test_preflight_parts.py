"""Pre-flight checks the runtime's optional parts (runtime.base.Part) a job will call before
any spend (job/preflight.py parts_needed, check_capabilities): every part the job needs and
the runtime lacks is one problem of one exit 2, naming why the job needs it. On FakeRuntime,
which lacks registry, import, commit, attach and spawn."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_task

from orchestrator.errors import InputError
from orchestrator.job.options import JobOptions
from orchestrator.job.preflight import check_capabilities, parts_needed
from orchestrator.models.manifest import Manifest, RosterMember, default_manifest
from orchestrator.runtime.base import Part
from orchestrator.runtime.fake import FakeRuntime
from orchestrator.tasks.load import load_task


def options(tmp_path: Path, **values: object) -> JobOptions:
    return JobOptions(job_name="parts", jobs_dir=tmp_path / "jobs", **values)  # type: ignore[arg-type]


def test_a_plain_job_needs_only_listing_and_layer_sizes_which_the_fake_has(tmp_path):
    task = load_task(make_task(tmp_path, "plain"))
    assert set(parts_needed([task], options(tmp_path), default_manifest("oracle"))) == {
        Part.LISTING, Part.LAYER_SIZES}
    caps = check_capabilities(FakeRuntime(), options(tmp_path), tasks=[task], manifest=default_manifest("oracle"))
    assert Part.COMMIT not in caps.parts  # lacking it is no problem for a job that does not need it


def test_every_part_a_job_needs_and_the_runtime_lacks_is_refused_at_once(tmp_path):
    snapshot = load_task(make_task(tmp_path, "snap", toml="[verifier]\nenvironment_mode = \"snapshot\"\n"))
    manifest = Manifest(condition="acp", roster=[
        RosterMember(id="lead", kind="orchestrator", agent="acp"),
        RosterMember(id="helper", kind="worker", agent="oracle")])
    with pytest.raises(InputError) as refused:
        check_capabilities(FakeRuntime(), options(tmp_path, registry="localhost:5000/orc"),
                           tasks=[snapshot], manifest=manifest)
    problems = refused.value.problems
    assert sorted(p.split("needs the runtime's '")[1].split("'")[0] for p in problems) == [
        "attach", "commit", "registry", "spawn"]
    assert any(p.startswith(f"{snapshot.path / 'task.toml'}: verifier environment_mode = snapshot")
               for p in problems)
    assert any(p.startswith("--registry localhost:5000/orc") for p in problems)
    assert all("FakeRuntime does not have" in p for p in problems)


def test_a_shared_verifier_on_another_network_needs_network_switching(tmp_path):
    task = load_task(make_task(tmp_path, "switch", toml="[agent]\nnetwork_mode = \"no-network\"\n"))
    needs = parts_needed([task], options(tmp_path))
    assert task.config.network_for("agent") != task.config.network_for("verifier")
    assert Part.NETWORK_SWITCH in needs
