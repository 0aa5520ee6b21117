"""Every option of a job reaches its trials identically through both executors: the local
executor and a Ray node make their TrialContext from the same TrialSpec (the Ray payload
once dropped the OCI runtime, the CA bundle's trust and the manifest's folder, and gave
its trials another condition hash)."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

from conftest import ROOT

from orchestrator.executors.spec import TrialSpec
from orchestrator.models.manifest import Manifest
from orchestrator.services import Upstream


def _spec(tmp_path: Path) -> TrialSpec:
    manifest = Manifest.model_validate({
        "condition": "gvisor-suite", "trial_budget": {"timeout_seconds": 42},
        "roster": [{"id": "lead", "kind": "orchestrator", "agent": "oracle"}],
        "sandbox": {"oci_runtime": "runsc"}})
    values = dict(job="j", manifest=manifest.model_dump(mode="json", exclude_unset=True),
                  manifest_dir=str(tmp_path), policy="memory-off",
                  upstreams={"up": Upstream("up", "http://10.0.0.1/v1", "m", None, {})}, ca_bundle=b"PEM",
                  build_policy="build", oci_runtime="runsc", registry="127.0.0.1:5000/p")
    spec = TrialSpec(**values)
    # every field is set to something other than its default: a new field must be too
    assert set(values) == set(TrialSpec.model_fields)
    assert all(getattr(spec, k) != f.default for k, f in TrialSpec.model_fields.items() if not f.is_required())
    return spec


def _context(spec: TrialSpec, ca_file: Path):
    return spec.context(runtime=None, job_dir=Path("/jobs/j"), images_for=None, watchdog=None,
                        networks=None, cancel=threading.Event(), upstreams=None, ca_file=ca_file)


def test_the_ray_payload_carries_the_whole_spec_and_both_sides_make_the_same_context(tmp_path):
    import pickle

    from orchestrator.executors.spec import NodeRequest

    spec = _spec(tmp_path)
    request = NodeRequest(spec=spec, task_name="ds/t", content_hash="h", attempt=0)  # as RayExecutor sends it
    on_node = NodeRequest.received(pickle.loads(pickle.dumps(request))).spec  # as run_on_node reads it
    assert on_node == spec
    ca = tmp_path / "ca.pem"
    here, there = _context(spec, ca), _context(on_node, ca)
    fields = ("job", "condition", "condition_hash", "agent_id", "policy", "timeout_override",
              "oci_runtime", "manifest_dir", "trust")
    assert {f: getattr(here, f) for f in fields} == {f: getattr(there, f) for f in fields}
    manifest = Manifest.model_validate(spec.manifest)
    assert here.condition_hash == manifest.condition_hash()  # not the hash of a re-dumped copy
    assert (here.oci_runtime, here.policy, here.timeout_override) == ("runsc", "memory-off", 42)
    assert here.trust.binds == {str(ca.resolve()): "/etc/orchestra/ca-bundle.pem"}


def test_only_the_spec_makes_a_trial_context():
    makers = []
    for path in (ROOT / "orchestrator").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "TrialContext":
                makers.append(str(path.relative_to(ROOT)))
    assert makers == ["orchestrator/executors/spec.py"]


def test_the_jobs_spec_keeps_the_condition_hash_of_the_manifest_it_ran(tmp_path):
    from orchestrator.job.runner import JobOptions, trial_spec
    from orchestrator.models.manifest import default_manifest

    for manifest in (default_manifest("oracle"), default_manifest("nop").with_agent("oracle")):
        spec = trial_spec(JobOptions(job_name="j", jobs_dir=tmp_path), manifest, None, None)
        assert _context(spec, None).condition_hash == manifest.condition_hash()
