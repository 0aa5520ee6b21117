"""The Ray backend on a real two-node cluster (loopback only): placement, equal rewards,
a node lost mid-trial."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, make_task, orchestra_objects

# a Ray cluster on loopback whose node is killed mid-trial; Ray workers outlive their jobs
pytestmark = pytest.mark.exclusive

pytest.importorskip("ray")
sys.path.insert(0, str(Path(__file__).parent))
from cluster import Cluster, loopback_env  # noqa: E402

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("ray"))
    try:
        c.start_head(cpus=2)
        c.add_worker("worker1", cpus=2)
        yield c
    finally:
        c.stop()


def orchestra(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([ORCHESTRA, *args], capture_output=True, text=True, timeout=timeout,
                          env={**loopback_env()})


@pytest.mark.part("ray")
def test_every_node_is_on_loopback(cluster):
    assert cluster.addresses() == ["127.0.0.1"]


def test_the_executor_seam_ray_and_local_give_equal_rewards_and_the_same_job_folder(cluster, runtime, tmp_path):
    common = ["--path", str(ROOT / "tasks/examples"), "--agent", "oracle", "-k", "3", "-n", "6", "-q",
              "--jobs-dir", str(tmp_path / "jobs")]
    # an OCI runtime the engine has besides its default: every node's containers get it
    others = [r for r in runtime.engine_facts().oci_runtimes if r != "runc"]
    oci = "io.containerd.runc.v2" if "io.containerd.runc.v2" in others else (others or [None])[0]
    ray_run = orchestra("run", *common, "--backend", "ray", "--ray-address", cluster.address,
                        *(["--runtime", oci] if oci else []),
                        "--job-name", "on-ray", "--json", str(tmp_path / "ray.json"))
    assert ray_run.returncode == 0, ray_run.stderr[-3000:]
    local_run = orchestra("run", *common, "--job-name", "local", "--json", str(tmp_path / "local.json"))
    assert local_run.returncode == 0, local_run.stderr[-3000:]
    on_ray = json.loads((tmp_path / "ray.json").read_text())
    local = json.loads((tmp_path / "local.json").read_text())
    rewards = lambda job: sorted((t["task"], t["attempt"], t["reward"]) for t in job["trials"])  # noqa: E731
    assert rewards(on_ray) == rewards(local) and on_ray["mean_reward"] == 1.0
    nodes = {t["node"] for t in on_ray["trials"]}
    assert None not in nodes and len(nodes) >= 2, nodes
    # the driver alone wrote the job folder, in the usual shape
    folders = list((tmp_path / "jobs/on-ray/trials").iterdir())
    assert len(folders) == 9 and all((f / "verifier").is_dir() for f in folders)
    # the OCI runtime, read back from each node's engine (the payload once dropped it)
    runtimes = {json.loads((f / "result.json").read_text())["limits"]["oci_runtime"] for f in folders}
    assert runtimes == {oci or "runc"}, runtimes

    def layout(job: str) -> list[tuple[str, str]]:  # (task, file in its trial folder), all trials
        root = tmp_path / "jobs" / job
        files = [("", str(p.relative_to(root))) for p in root.iterdir() if p.is_file()]
        return sorted(files + [(f.name.split("__")[0], str(p.relative_to(f)))
                               for f in (root / "trials").iterdir() for p in f.rglob("*")])
    assert layout("on-ray") == layout("local") and len(layout("local")) > 9 * 5
    report = orchestra("report", str(tmp_path / "jobs/on-ray"))
    assert report.returncode == 0
    assert orchestra_objects(runtime) == ([], [])


def test_a_node_lost_mid_trial_is_retried_elsewhere_and_every_trial_runs_once(cluster, runtime, tmp_path):
    cluster.add_worker("worker2", cpus=2)
    make_task(tmp_path / "ds", "nap", solve="sleep 10\ntouch /app/ok\n",
              toml="[agent]\ntimeout_sec = 120\n[environment]\ncpus = 1\nmemory_mb = 256\n")
    job_dir = tmp_path / "jobs" / "lossy"
    proc = subprocess.Popen([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-k", "6",
                             "-n", "6", "-q", "--backend", "ray", "--ray-address", cluster.address,
                             "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "lossy"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=loopback_env())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until six agents are running (2 per node)
        if len(runtime.api.containers(filters={"label": "orchestra.kind=agent"})) >= 6:
            break
        time.sleep(0.5)
    time.sleep(2)
    cluster.kill("worker2")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    job = json.loads((job_dir / "result.json").read_text())
    ids = [t["trial_id"] for t in job["trials"]]
    assert len(ids) == 6 and len(set(ids)) == 6
    assert job["counts"] == {"none": 6} and job["mean_reward"] == 1.0
    retried = [t for t in job["trials"] if t["retries"]]
    assert 1 <= len(retried) <= 2, job["trials"]
    assert job["retried"] == len(retried)
    for trial in retried:
        result = json.loads(next((job_dir / "trials").glob(f"*__{trial['trial_id'][:12]}/result.json")).read_text())
        assert result["retries"] and result["retries"][0].startswith("infra_error: ray:")
    assert orchestra_objects(runtime) == ([], [])


def test_an_exception_from_orchestras_own_code_on_a_node_stops_the_job(cluster, runtime, tmp_path):
    """Only node loss and Ray's own errors are infrastructure. A bug in orchestra's code on a
    node (injected by tests/ray/loopback/sitecustomize.py for this task name) surfaces as
    itself, exit 3, never retried as infra; the job still writes its result and cleans up."""
    make_task(tmp_path / "ds", "injected-own-bug", solve="touch /app/ok\n")
    job_dir = tmp_path / "jobs" / "own-bug"
    run = orchestra("run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-q", "--backend", "ray",
                    "--ray-address", cluster.address, "--jobs-dir", str(tmp_path / "jobs"),
                    "--job-name", "own-bug", timeout=300)
    assert run.returncode == 3, (run.returncode, run.stderr[-3000:])
    assert "ZeroDivisionError" in run.stderr and "injected: a bug in orchestra's own code" in run.stderr
    assert "infra_error" not in run.stdout + run.stderr and "ray.trial_lost" not in run.stderr
    assert (job_dir / "result.json").is_file()
    assert orchestra_objects(runtime) == ([], [])


@pytest.mark.part("gvisor")
def test_gvisor_on_a_ray_node_shows_gvisors_kernel_inside_the_trial(cluster, runtime, tmp_path):
    """`--backend ray --runtime runsc`: the node's containers run under gVisor (the payload
    once dropped the OCI runtime); the trial sees gVisor's kernel, not the host's."""
    import os

    if "runsc" not in runtime.engine_facts().oci_runtimes:
        pytest.skip("gVisor (runsc) is not registered with this engine (scripts/ensure-docker.sh registers it)")
    make_task(tmp_path / "ds", "gvisor-on-ray", solve="uname -r > /logs/artifacts/uname.txt\n"
              "(cat /proc/kallsyms 2>/dev/null | head -c 4096 | wc -c) > /logs/artifacts/kallsyms.txt\ntouch /app/ok\n")
    run = orchestra("run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-q", "--backend", "ray",
                    "--ray-address", cluster.address, "--runtime", "runsc", "--jobs-dir", str(tmp_path / "jobs"),
                    "--job-name", "gvisor-ray", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    folder = next((tmp_path / "jobs/gvisor-ray/trials").iterdir())
    result = json.loads((folder / "result.json").read_text())
    assert result["reward"] == {"reward": 1.0} and result["node"] and result["limits"]["oci_runtime"] == "runsc"
    assert os.uname().release not in (folder / "artifacts/uname.txt").read_text()
    assert (folder / "artifacts/kallsyms.txt").read_text().strip() == "0"
    assert orchestra_objects(runtime) == ([], [])
