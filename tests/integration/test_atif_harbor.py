"""Every trial's ATIF validates against Harbor's own trajectory models: harbor, pinned, from
PyPI, in the throwaway venv scripts/ensure-test-tools.sh makes under the cache, run in a
subprocess (orchestra never imports it). Real trials on the real engine: the oracle (a
command, no model), nop (nothing) and the reference agent on the replay endpoint (its
trajectory matched to the proxy's model calls); the reference trial rebuilt from the
proxy's exchanges alone, as an agent without a log of its own gets it; and the files
`orchestra report --atif` exports."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.atif import FILE_NAME
from orchestrator.models.endpoint import load_endpoints
from orchestrator.models.manifest import load_manifest
from orchestrator.paths import cache_root
from orchestrator.services.exchanges import RECORD
from orchestrator.tasks.load import load_tasks
from orchestrator.trial.atif import TrialFacts, write_atif

HARBOR_PYTHON = cache_root() / "harbor-venv" / "bin" / "python"
ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
HELLO = ROOT / "tasks" / "examples" / "hello-file"
JUDGE = """
import json, sys
from importlib.metadata import version
from harbor.models.trajectories import Trajectory
verdict = {"harbor": version("harbor"), "valid": {}, "invalid": {}}
for path in sys.argv[1:]:
    try:
        doc = Trajectory.model_validate_json(open(path).read())
        verdict["valid"][path] = [doc.schema_version, [s.source for s in doc.steps]]
    except Exception as exc:
        verdict["invalid"][path] = str(exc)
print(json.dumps(verdict))
"""


def harbor_judges(paths: list[Path]) -> dict:
    if not HARBOR_PYTHON.exists():
        pytest.fail(f"{HARBOR_PYTHON} is missing: scripts/ensure-test-tools.sh (make test-tools) installs "
                    "harbor's ATIF models there")
    done = subprocess.run([str(HARBOR_PYTHON), "-c", JUDGE, *map(str, paths)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_trials_atif_validates_against_harbors_own_models(runtime, tmp_path):
    jobs = tmp_path / "jobs"
    run(runtime, HELLO, jobs, agent="oracle", name="atif-oracle")
    run(runtime, HELLO, jobs, agent="nop", name="atif-nop")
    options = JobOptions(job_name="atif-reference", jobs_dir=jobs, n_concurrent=1,
                         endpoints=load_endpoints([ROOT / "endpoints/replay.json"]))
    run_job(runtime, load_tasks(HELLO), load_manifest(ROOT / "manifests/solo-replay.yaml"), options)
    trials = {job.name: next((job / "trials").iterdir()) for job in jobs.iterdir()}
    collected = {name: folder / "agent" / FILE_NAME for name, folder in trials.items()}
    docs = {name: json.loads(path.read_text()) for name, path in collected.items()}

    assert {n: d["extra"]["source"] for n, d in docs.items()} == {
        "atif-oracle": "agent command", "atif-nop": "none", "atif-reference": "agent trajectory"}
    oracle, reference = docs["atif-oracle"], docs["atif-reference"]
    assert oracle["steps"][1]["llm_call_count"] == 0
    assert oracle["steps"][1]["tool_calls"][0]["arguments"] == {"command": "bash /solution/solve.sh"}
    assert oracle["steps"][1]["observation"]["results"][0]["extra"]["exit_code"] == 0
    agent_steps = [s for s in reference["steps"] if s["source"] == "agent"]
    recorded = (trials["atif-reference"] / RECORD).read_text().splitlines()
    assert len(agent_steps) == len(recorded) >= 2  # each model call matched to its step
    assert all(s["llm_call_count"] == 1 and s["metrics"]["prompt_tokens"] > 0 and s["timestamp"]
               for s in agent_steps)
    results = [r for s in agent_steps for r in s.get("observation", {}).get("results", [])]
    assert results and all(r["source_call_id"] and r["extra"]["exit_code"] == 0 for r in results)
    assert "shell" in [t["function"]["name"] for t in reference["agent"]["tool_definitions"]]
    assert reference["final_metrics"]["total_prompt_tokens"] == sum(
        json.loads(line)["response"]["usage"]["prompt_tokens"] for line in recorded)

    # an agent without a trajectory of its own: the same trial from the proxy's record alone
    bare = tmp_path / "bare"
    shutil.copytree(trials["atif-reference"], bare)
    (bare / "agent" / "trajectory.jsonl").unlink()
    from_calls = write_atif(bare / "agent", bare / RECORD, TrialFacts(trial_id="t", agent="reference", agent_version="0"))
    assert from_calls.extra["source"] == "model exchanges"  # type: ignore[index]
    first = from_calls.steps[1]  # the call's tool call, answered in the next request
    assert first.observation.results[0].source_call_id == first.tool_calls[0].tool_call_id  # type: ignore[union-attr,index]

    out = tmp_path / "atif"
    done = subprocess.run([ORCHESTRA, "report", str(jobs / "atif-reference"), "--atif", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "wrote 1 ATIF trajectories" in done.stdout + done.stderr
    exported = sorted(out.iterdir())
    assert [p.read_bytes() for p in exported] == [collected["atif-reference"].read_bytes()]

    paths = [*collected.values(), bare / "agent" / FILE_NAME, *exported]
    verdict = harbor_judges(paths)
    assert verdict["invalid"] == {} and len(verdict["valid"]) == len(paths) == 5, verdict
    assert verdict["harbor"] == "0.26.0"
    assert {tuple(v[1][:2]) for v in verdict["valid"].values()} >= {("user", "agent")}


def test_harbor_rejects_what_atif_forbids(tmp_path):
    """The judge is not a rubber stamp: a tool result naming another step's call fails."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": "ATIF-v1.7", "agent": {"name": "x", "version": "1"},
                               "steps": [{"step_id": 1, "source": "agent", "message": "",
                                          "observation": {"results": [{"source_call_id": "nope"}]}}]}))
    verdict = harbor_judges([bad])
    assert list(verdict["invalid"]) == [str(bad)] and "nope" in verdict["invalid"][str(bad)]
