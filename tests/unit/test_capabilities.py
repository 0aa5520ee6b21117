"""Which engine addresses count as this host (where loop disks and the firewall mean
something): the socket, and TCP on loopback; anything else may be another machine."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator.runtime.docker import DockerRuntime


@pytest.mark.parametrize(("url", "local"), [
    ("unix:///var/run/docker.sock", True),
    ("unix:///tmp/pm/podman.sock", True),
    ("tcp://127.0.0.1:2376", True),
    ("tcp://localhost:2375", True),
    ("tcp://[::1]:2376", True),
    ("tcp://10.0.0.5:2376", False),
    ("tcp://build-box.example:2376", False),
    ("ssh://ci@127.0.0.1", False),  # its socket is the far side's, even when that is here
    ("ssh://ci@big-box", False),
])
def test_local_engine(url, local):
    runtime = DockerRuntime(engine=SimpleNamespace(base_url=url, podman=False))
    assert runtime.local_engine is local


def test_a_manifest_sandbox_policy_is_the_jobs_default_and_cannot_be_weakened(tmp_path):
    from orchestrator.errors import InputError
    from orchestrator.job.runner import JobOptions, with_sandbox_policy
    from orchestrator.models.manifest import Manifest

    suite = Manifest.model_validate({
        "roster": [{"id": "lead", "kind": "orchestrator", "agent": "oracle"}],
        "sandbox": {"oci_runtime": "runsc", "require": ["host-isolation"]}})
    options = JobOptions(job_name="j", jobs_dir=tmp_path, require=["disk-quota"])
    resolved = with_sandbox_policy(options, suite)
    assert (resolved.oci_runtime, resolved.require) == ("runsc", ["disk-quota", "host-isolation"])
    assert with_sandbox_policy(JobOptions(job_name="j", jobs_dir=tmp_path, oci_runtime="runsc"),
                               suite).oci_runtime == "runsc"
    with pytest.raises(InputError, match="sandbox.oci_runtime is 'runsc'"):
        with_sandbox_policy(JobOptions(job_name="j", jobs_dir=tmp_path, oci_runtime="runc"), suite)
    plain = Manifest.model_validate({"roster": [{"id": "lead", "kind": "orchestrator"}]})
    assert "sandbox" not in plain.model_dump(exclude_unset=True)  # old condition hashes hold
    with pytest.raises(ValueError, match="require"):
        Manifest.model_validate({"roster": [{"id": "lead", "kind": "orchestrator"}],
                                 "sandbox": {"require": ["gpu"]}})
