"""The hostile-agent and fault matrix: real trials on the real engine, all in one job, so
each case also shows that the other trials of the same job are unaffected.
tests/hostile/README.md tabulates each case, what held it and the measured figure."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import make_task, nothing_left, orchestra_objects
from kit import OCI_RUNTIME

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import TrialResult
from orchestrator.tasks.load import load_tasks

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
FIGURES: dict[str, object] = {}  # printed at the end, copied into README.md
SMALL = "[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 256\n"
REWARD_OK = "mkdir -p /logs/verifier; if [ -e /app/ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"

CASES = {
    "hog": dict(toml="[agent]\ntimeout_sec = 60\n[environment]\ncpus = 0.5\nmemory_mb = 128\n",
                solve="python3 -c \"x = b'a' * (4 * 128 * 1024 * 1024)\"\ntouch /app/ok\n"),
    "forkbomb": dict(toml="[agent]\ntimeout_sec = 6\n[environment]\ncpus = 0.5\npids_limit = 64\n",
                     solve="bomb() { bomb | bomb & }; bomb\nsleep 60\n"),
    "fill-workdir": dict(toml="[environment]\ncpus = 0.5\nstorage_mb = 64\n",
                         solve="dd if=/dev/zero of=/app/fill bs=1M count=512 2>/dev/null\ntouch /app/ok\n",
                         test="mkdir -p /logs/verifier\necho \"{\\\"reward\\\": 1, \\\"bytes\\\": $(wc -c < /app/fill)}\" > /logs/verifier/reward.json\n"),  # not stat: gVisor 20221219 answers its statx with EINVAL
    "fill-layer": dict(toml="[agent]\ntimeout_sec = 120\n[environment]\ncpus = 0.5\nstorage_mb = 64\n",
                       solve="for i in $(seq 200); do dd if=/dev/zero of=/var/tmp/f$i bs=1M count=16 2>/dev/null; sleep 0.1; done\ntouch /app/ok\n"),
    "flood": dict(toml="[agent]\ntimeout_sec = 120\n[environment]\ncpus = 0.5\nstorage_mb = 2600\n",
                  solve="head -c 1G /dev/zero | tr '\\0' x\nhead -c 1G /dev/zero | tr '\\0' y >&2\ntouch /app/ok\n"),
    "spinner": dict(toml="[environment]\ncpus = 0.5\n",
                    solve="""
                        u0=$(cat /sys/fs/cgroup/cpuacct/cpuacct.usage); t0=$(date +%s%N)
                        timeout 4 sh -c 'while :; do :; done' & timeout 4 sh -c 'while :; do :; done' & wait
                        u1=$(cat /sys/fs/cgroup/cpuacct/cpuacct.usage); t1=$(date +%s%N)
                        python3 -c "print(($u1 - $u0) / ($t1 - $t0))" > /logs/artifacts/share.txt
                        touch /app/ok
                    """),
    "many-files": dict(toml=SMALL, solve="cd /logs/artifacts && python3 -c \"[open(f'f{i}', 'w').write('x') for i in range(5000)]\"\ntouch /app/ok\n"),
    "big-artifact": dict(toml=SMALL, solve="truncate -s 2G /logs/artifacts/big.bin\ntouch /app/ok\n"),
    "links": dict(toml=SMALL, solve="ln -s /etc/passwd /logs/artifacts/passwd\nln -s ../../../.. /logs/artifacts/up\nmkdir -p /logs/artifacts/d && ln -s / /logs/artifacts/d/root\ntouch /app/ok\n"),
    "replace-bash": dict(toml='artifacts = ["/app/answer.txt"]\n[verifier]\nenvironment_mode = "separate"\n' + SMALL,
                         solve="echo wrong > /app/answer.txt\nprintf '#!/bin/sh\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > /bin/bash.new && mv /bin/bash.new $(readlink -f /bin/bash)\n",
                         test="mkdir -p /logs/verifier; [ \"$(cat /app/answer.txt)\" = right ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"),
    "kill-pid1": dict(toml=SMALL, solve="touch /app/ok\nkill -9 1\nsleep 30\n"),
    "background": dict(toml="[verifier]\nenvironment_mode = \"snapshot\"\n" + SMALL, solve="(while :; do date >> /app/late; sleep 0.2; done) &\nsleep 1\ntouch /app/ok\n",
                       test="mkdir -p /logs/verifier; a=$(wc -l < /app/late); sleep 1.5; b=$(wc -l < /app/late)\n[ \"$a\" = \"$b\" ] && [ -e /app/ok ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"),
    "stubborn": dict(toml="[agent]\ntimeout_sec = 3\n" + SMALL, solve="touch /app/ok\ntrap '' TERM\nwhile :; do sleep 1; done\n"),
    "egress": dict(toml='[relay]\nenabled = true\n[environment]\ncpus = 0.5\nnetwork_mode = "none"\n',
                   solve="""
                       python3 - <<'PY'
                       import socket, subprocess
                       s = socket.socket(); s.settimeout(2)
                       try:
                           s.connect(("1.1.1.1", 443)); outside = "open"
                       except OSError:
                           outside = "blocked"
                       relay = subprocess.run(["chan", "whoami"], capture_output=True).returncode
                       open("/logs/artifacts/egress.txt", "w").write(f"{outside} relay={relay}")
                       PY
                       grep -q "blocked relay=0" /logs/artifacts/egress.txt && touch /app/ok
                   """),
    "stack-readonly": dict(toml=SMALL, solve="sh -c 'echo evil > /opt/orchestra/bin/mem' 2>/logs/artifacts/err.txt || touch /app/ok\n"),
    "nonroot": dict(toml='[agent]\nuser = "nobody"\n' + SMALL, solve="id -u > /logs/artifacts/uid.txt\n[ \"$(id -u)\" != 0 ] && touch /app/ok\n"),
    "reward-notjson": dict(toml=SMALL, test="mkdir -p /logs/verifier; echo 'not json' > /logs/verifier/reward.json\n"),
    "reward-list": dict(toml=SMALL, test="mkdir -p /logs/verifier; echo '[1, 2]' > /logs/verifier/reward.json\n"),
    "reward-nan": dict(toml=SMALL, test="mkdir -p /logs/verifier; echo '{\"reward\": NaN}' > /logs/verifier/reward.json\n"),
    "reward-string": dict(toml=SMALL, test="mkdir -p /logs/verifier; echo '{\"reward\": \"lots\"}' > /logs/verifier/reward.json\n"),
    "verifier-hang": dict(toml="[verifier]\ntimeout_sec = 3\n" + SMALL, test="sleep 600\n"),
    "unbuildable": dict(toml=SMALL, dockerfile="FROM python:3.12-slim-bookworm\nRUN exit 9\n"),
    "bystander-a": dict(toml=SMALL, solve="touch /app/ok\n"),
    "bystander-b": dict(toml=SMALL, solve="touch /app/ok\n"),
}


@pytest.fixture(scope="module", autouse=True)
def _nothing_left_after_this_module(runtime):
    """Rerunning the hostile matrix leaves no labelled object and no loop device (issue 11)."""
    yield
    assert nothing_left(runtime) == {}


@pytest.fixture(scope="module")
def matrix(runtime, tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    for name, case in CASES.items():
        make_task(root / "ds", name, toml=case.get("toml", SMALL), solve=case.get("solve", "true\n"),
                  test=case.get("test", REWARD_OK), dockerfile=case.get("dockerfile"))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    options = JobOptions(job_name="hostile", jobs_dir=root / "jobs", n_concurrent=4, max_retries=0,
                         oci_runtime=OCI_RUNTIME)
    job = run_job(runtime, load_tasks(root / "ds"), default_manifest("oracle"), options)
    FIGURES["job_seconds"] = round(time.monotonic() - started, 1)
    FIGURES["orchestrator_rss_growth_mb"] = round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024, 1)
    trials = {}
    for folder in (root / "jobs/hostile/trials").iterdir():
        r = TrialResult.model_validate_json((folder / "result.json").read_text())
        trials[r.task.split("/")[-1]] = (r, folder)
    yield job, trials, root
    print("\nhostile figures: " + json.dumps(FIGURES, sort_keys=True))


def test_every_case_has_a_result_and_nothing_is_left_behind(matrix, runtime):
    job, trials, _ = matrix
    assert sorted(trials) == sorted(CASES) and job.n_trials == len(CASES)
    assert orchestra_objects(runtime) == ([], [])
    if OCI_RUNTIME:  # `make test-gvisor`: every case's agent really ran under it
        launched = [r for r, _ in trials.values() if r.failure_mode not in ("launch_error", "build_error")]
        assert {r.container_runtimes.get("agent") for r in launched} == {OCI_RUNTIME}


def test_bystanders_are_unaffected(matrix):
    _, trials, _ = matrix
    for name in ("bystander-a", "bystander-b"):
        assert trials[name][0].reward == {"reward": 1.0} and trials[name][0].failure_mode == "none"


def test_resource_exhaustion_ends_only_the_offending_trial(matrix):
    _, t, _ = matrix
    assert t["hog"][0].failure_mode == "oom"
    assert t["forkbomb"][0].failure_mode == "agent_timeout" and t["forkbomb"][0].limits.pids_limit == 64
    assert t["fill-workdir"][0].reward["bytes"] <= 64 * 1024 * 1024
    FIGURES["fill_workdir_bytes_kept"] = int(t["fill-workdir"][0].reward["bytes"])
    assert t["fill-layer"][0].failure_mode == "disk_limit"
    FIGURES["fill_layer_seconds_to_kill"] = t["fill-layer"][0].timings.agent
    if OCI_RUNTIME == "runsc":  # gVisor's kernel mounts no cgroupfs inside: the share cannot be
        assert t["spinner"][0].limits.nano_cpus == 500_000_000  # read there; the host cgroup has it
        return
    share = float((t["spinner"][1] / "artifacts/share.txt").read_text())
    assert 0.1 <= share <= 0.6, share  # cpus = 0.5 holds (the floor depends on the load)
    FIGURES["spinner_cpu_share_at_0.5"] = round(share, 3)


def test_a_2gb_output_flood_is_capped_and_the_host_stays_flat(matrix):
    _, t, _ = matrix
    flood, folder = t["flood"]
    sizes = {n: (folder / "agent" / n).stat().st_size for n in ("stdout.txt", "stderr.txt")}
    assert sum(sizes.values()) <= 32 * 1024 * 1024
    assert flood.collected["/logs/agent"]["truncated"] is True
    if OCI_RUNTIME == "runsc":  # 2 GB through gVisor's kernel does not finish in the 120 s
        assert flood.failure_mode == "agent_timeout"  # (tests/hostile/README.md, under gVisor)
    else:
        assert flood.reward == {"reward": 1.0}
    FIGURES["flood_bytes_kept"] = sum(sizes.values())
    assert FIGURES["orchestrator_rss_growth_mb"] < 200


def test_collected_archives_are_bounded_and_never_escape(matrix):
    _, t, root = matrix
    assert t["many-files"][0].collected["/logs/artifacts"]["files"] == 5000
    big = t["big-artifact"][0].collected["/logs/artifacts"]
    assert big["truncated"] is True and big["bytes"] <= 256 * 1024 * 1024
    FIGURES["big_artifact_bytes_kept"] = big["bytes"]
    links = t["links"][1] / "artifacts"
    assert not any(p.is_symlink() for p in links.rglob("*"))
    assert t["links"][0].collected["/logs/artifacts"]["rejected"] == 3
    outside = [p for p in root.parent.iterdir() if p.name in ("passwd", "root")]
    assert outside == []


def test_tampering_does_not_reach_the_grader(matrix):
    _, t, _ = matrix
    assert t["replace-bash"][0].reward == {"reward": 0.0}
    assert t["kill-pid1"][0].verifier_exit_code is not None and t["kill-pid1"][0].reward is not None
    assert t["background"][0].reward == {"reward": 1.0}  # nothing the agent left kept writing
    assert t["stubborn"][0].failure_mode == "agent_timeout" and t["stubborn"][0].timings.agent < 3 + 10
    assert t["egress"][0].reward == {"reward": 1.0}
    assert (t["egress"][1] / "artifacts/egress.txt").read_text() == "blocked relay=0"
    assert t["stack-readonly"][0].reward == {"reward": 1.0}
    assert "Read-only file system" in (t["stack-readonly"][1] / "artifacts/err.txt").read_text()
    assert t["nonroot"][0].reward == {"reward": 1.0}
    assert (t["nonroot"][1] / "artifacts/uid.txt").read_text().strip() == "65534"


@pytest.mark.parametrize("name, fragment", [
    ("reward-notjson", "not JSON"), ("reward-list", "flat map"), ("reward-nan", "not finite"),
    ("reward-string", "not a number")])
def test_bad_reward_files_are_a_verifier_error_with_the_reason(matrix, name, fragment):
    _, t, _ = matrix
    result = t[name][0]
    assert result.failure_mode == "verifier_error" and result.reward is None
    assert fragment in result.error


def test_faulty_tasks_fail_alone(matrix):
    _, t, _ = matrix
    assert t["verifier-hang"][0].failure_mode == "verifier_timeout"
    assert t["unbuildable"][0].failure_mode == "build_error"


@pytest.mark.parametrize("rel, content, fragment", [
    ("memory/seeds.toml", "[[seed]]\nslug = 'core'\nvalue = 'x'\n", "seeds.toml: field 'seed.0.slug'"),
    ("memory/seeds.toml", "[[seed]\n", "seeds.toml: not valid TOML"),
    ("memory/project/f.md", "---\nname: f\n---\nbody\n", "f.md: field 'metadata'"),
    ("memory/project/g.md", "no frontmatter\n", "g.md: no YAML frontmatter"),
    ("instruction.md", "x" * (1024 * 1024 + 1), "instruction.md: 1048577 bytes"),
])
def test_bad_task_inputs_exit_2_naming_the_file(tmp_path, rel, content, fragment):
    task = make_task(tmp_path / "ds", "bad")
    (task / rel).parent.mkdir(parents=True, exist_ok=True)
    (task / rel).write_text(content)
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(task), "--jobs-dir", str(tmp_path / "j")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and fragment in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_relay_keys_never_reach_the_verifier(runtime, tmp_path):
    # snapshot: the verifier is a container made from the agent's (shared grades in place,
    # where the agent container's config holds no secret either: they go through exec)
    make_task(tmp_path / "ds", "shared-relay", solve="touch /app/ok\n",
              toml='[relay]\nenabled = true\n[verifier]\nenvironment_mode = "snapshot"\n' + SMALL)
    envs: list[list[str]] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for row in runtime.api.containers(all=True, filters={"label": "orchestra.kind=verifier"}):
                try:
                    envs.append(runtime.api.inspect_container(row["Id"])["Config"]["Env"] or [])
                except Exception:
                    pass
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        job = run_job(runtime, load_tasks(tmp_path / "ds"), default_manifest("oracle"),
                      JobOptions(job_name="keys", jobs_dir=tmp_path / "jobs"))
    finally:
        stop.set()
        watcher.join()
    assert job.mean_reward == 1.0 and envs
    assert not any(e.startswith(("ORCHESTRA_PRIVATE_KEY=", "ORCHESTRA_AUTH_TAG=")) for env in envs for e in env)


def test_a_full_job_disk_stops_the_job_cleanly_and_keeps_written_results(runtime, tmp_path):
    image, mount = tmp_path / "jobs.img", tmp_path / "jobs"
    mount.mkdir()
    subprocess.run(["truncate", "-s", "8M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    try:
        make_task(tmp_path / "ds", "a-small", solve="touch /app/ok\n", toml=SMALL)
        make_task(tmp_path / "ds", "b-huge", toml=SMALL,
                  solve="head -c 30M /dev/urandom > /logs/artifacts/blob\ntouch /app/ok\n")
        make_task(tmp_path / "ds", "c-later", solve="touch /app/ok\n", toml=SMALL)
        proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-n", "1",
                               "--jobs-dir", str(mount), "--job-name", "full", "-q"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 3, proc.stderr
        assert "no space left" in proc.stderr and "Traceback" not in proc.stderr
        written = json.loads(next((mount / "full/trials").glob("a-small__*/result.json")).read_text())
        assert written["reward"] == {"reward": 1.0}
        assert orchestra_objects(runtime) == ([], [])
    finally:
        subprocess.run(["umount", "-l", str(mount)])


def test_an_unreachable_engine_exits_3(tmp_path):
    make_task(tmp_path / "ds", "t")
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--jobs-dir", str(tmp_path / "j")],
                          capture_output=True, text=True, env={**os.environ, "DOCKER_HOST": "tcp://127.0.0.1:9"})
    assert proc.returncode == 3 and "Docker engine unreachable" in proc.stderr


@pytest.mark.part("gvisor")
def test_gvisor_runs_every_container_of_a_trial_and_shows_none_of_the_host_kernel(runtime, tmp_path):
    """`--runtime runsc`: the agent container and the verifier in every mode run under
    gVisor, read back from the engine; inside, the kernel is gVisor's (uname, /proc/version)
    and the host's kernel interfaces show nothing (kallsyms, dmesg). `pids_limit` holds
    inside (gVisor's RLIMIT_NPROC) without the host cgroup killing the sandbox."""
    if "runsc" not in runtime.engine_facts().oci_runtimes:
        pytest.skip("gVisor (runsc) is not registered with this engine (scripts/ensure-docker.sh "
                    "registers it where it starts the engine itself)")
    probe = ("uname -r > /logs/artifacts/uname.txt; cat /proc/version > /logs/artifacts/version.txt\n"
             "(cat /proc/kallsyms 2>/dev/null | head -c 4096 | wc -c) > /logs/artifacts/kallsyms.txt\n"
             "(dmesg 2>/dev/null | head -3) > /logs/artifacts/dmesg.txt\n"
             "echo ok > /logs/artifacts/ok.txt; touch /app/ok\n")
    artifact_test = ("mkdir -p /logs/verifier; if [ -f /logs/artifacts/ok.txt ]; then echo 1; else echo 0; fi"
                     " > /logs/verifier/reward.txt\n")
    for mode in ("shared", "snapshot", "separate"):
        make_task(tmp_path / "ds", f"gvisor-{mode}", solve=probe, test=artifact_test if mode == "separate" else None,
                  toml=SMALL + f'[verifier]\nenvironment_mode = "{mode}"\n')
    make_task(tmp_path / "ds", "gvisor-sidecar", solve=probe, toml=SMALL, files={  # a compose sidecar
        "environment/docker-compose.yaml": "services:\n  main: {}\n  side:\n    build:\n      context: ./side\n"
                                           "    command: [\"sleep\", \"3600\"]\n",
        "environment/side/Dockerfile": "FROM python:3.12-slim-bookworm\n"})
    forks = ("python3 -c \"\nimport os, time\nn = 0\ntry:\n    while n < 500:\n"
             "        if os.fork() == 0:\n            time.sleep(3); os._exit(0)\n        n += 1\n"
             "except OSError:\n    pass\nopen('/logs/artifacts/forks.txt', 'w').write(str(n))\n\"\n" + probe)
    make_task(tmp_path / "ds", "gvisor-pids", solve=forks, toml=SMALL + "pids_limit = 32\n")
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "--runtime", "runsc",
                           "--jobs-dir", str(tmp_path / "j"), "--job-name", "gvisor", "-q"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    host_release = os.uname().release
    for folder in (tmp_path / "j/gvisor/trials").iterdir():
        result = json.loads((folder / "result.json").read_text())
        assert result["reward"] == {"reward": 1.0}, (folder.name, result["error"])
        assert result["limits"]["oci_runtime"] == "runsc"
        expected = {"agent": "runsc"}
        if "snapshot" in folder.name or "separate" in folder.name:  # a verifier container of its own
            assert result["verifier_limits"]["oci_runtime"] == "runsc", folder.name
            expected["verifier"] = "runsc"
        if "sidecar" in folder.name:
            expected["sidecar:side"] = "runsc"
        assert result["container_runtimes"] == expected, folder.name
        artifacts = folder / "artifacts"
        assert host_release not in (artifacts / "uname.txt").read_text()
        assert host_release not in (artifacts / "version.txt").read_text()
        assert (artifacts / "kallsyms.txt").read_text().strip() == "0"  # no host symbols
        assert host_release not in (artifacts / "dmesg.txt").read_text()
        if "pids" in folder.name:  # gVisor's kernel holds the processes; the sandbox survives
            assert int((artifacts / "forks.txt").read_text()) < 32  # EAGAIN before the 32nd
            assert result["limits"]["pids_limit"] == 32 and result["limits"]["host_pids_limit"] == 128 + 16 * 32
    assert orchestra_objects(runtime) == ([], [])

