"""The hostile-agent and fault matrix: real trials on the real engine, all in one job, so
each case also shows that the other trials of the same job are unaffected.
tests/hostile/README.md tabulates each case, what held it and the measured figure."""

from __future__ import annotations

import json
import os
import resource
import socket
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

# Each case's task records that its attack happened (the positive control each test reads
# first): into /logs/agent or /logs/artifacts (collected after the agent phase) or, from
# test.sh, /logs/verifier (collected after grading).
CASES = {
    "hog": dict(toml="[agent]\ntimeout_sec = 60\n[environment]\ncpus = 0.5\nmemory_mb = 128\n",
                solve="python3 -c \"x = b'a' * (4 * 128 * 1024 * 1024)\"\necho $? > /logs/artifacts/hog-exit.txt\n"
                      "touch /app/ok\n"),
    "forkbomb": dict(toml="[agent]\ntimeout_sec = 6\n[environment]\ncpus = 0.5\npids_limit = 64\n",
                     solve="bomb() { bomb | bomb & }; bomb\nsleep 60\n"),
    "fill-workdir": dict(toml="[environment]\ncpus = 0.5\nstorage_mb = 64\n",
                         solve="dd if=/dev/zero of=/app/fill bs=1M count=512 2>/logs/artifacts/dd.txt\ntouch /app/ok\n",
                         test="mkdir -p /logs/verifier\necho \"{\\\"reward\\\": 1, \\\"bytes\\\": $(wc -c < /app/fill)}\" > /logs/verifier/reward.json\n"),  # not stat: gVisor 20221219 answers its statx with EINVAL
    "fill-layer": dict(toml="[agent]\ntimeout_sec = 120\n[environment]\ncpus = 0.5\nstorage_mb = 64\n",
                       solve="for i in $(seq 200); do dd if=/dev/zero of=/var/tmp/f$i bs=1M count=16 2>/dev/null;"
                             " echo $i > /logs/artifacts/written-16mb.txt; sleep 0.1; done\ntouch /app/ok\n"),
    # PIPESTATUS "0 0": head sent all 1 GiB and tr wrote all of it, for each stream
    "flood": dict(toml="[agent]\ntimeout_sec = 120\n[environment]\ncpus = 0.5\nstorage_mb = 2600\n",
                  solve="head -c 1G /dev/zero | tr '\\0' x\necho ${PIPESTATUS[*]} > /logs/artifacts/stdout-sent.txt\n"
                        "head -c 1G /dev/zero | tr '\\0' y >&2\necho ${PIPESTATUS[*]} > /logs/artifacts/stderr-sent.txt\n"
                        "touch /app/ok\n"),
    "spinner": dict(toml="[environment]\ncpus = 0.5\n",
                    solve="""
                        u0=$(cat /sys/fs/cgroup/cpuacct/cpuacct.usage); t0=$(date +%s%N)
                        timeout 4 sh -c 'while :; do :; done' & a=$!
                        timeout 4 sh -c 'while :; do :; done' & b=$!
                        wait $a; ea=$?; wait $b; eb=$?
                        u1=$(cat /sys/fs/cgroup/cpuacct/cpuacct.usage); t1=$(date +%s%N)
                        echo $ea $eb > /logs/artifacts/spun.txt
                        python3 -c "print(($u1 - $u0) / ($t1 - $t0))" > /logs/artifacts/share.txt
                        touch /app/ok
                    """),
    "many-files": dict(toml=SMALL, solve="cd /logs/artifacts && python3 -c \"[open(f'f{i}', 'w').write('x') for i in range(5000)]\"\n"
                                         "ls /logs/artifacts | wc -l > /logs/agent/made.txt\ntouch /app/ok\n"),
    "big-artifact": dict(toml=SMALL, solve="truncate -s 2G /logs/artifacts/big.bin\n"
                                           "python3 -c \"import os; print(os.path.getsize('/logs/artifacts/big.bin'))\" > /logs/agent/size.txt\n"
                                           "touch /app/ok\n"),
    "links": dict(toml=SMALL, solve="ln -s /etc/passwd /logs/artifacts/passwd\nln -s ../../../.. /logs/artifacts/up\nmkdir -p /logs/artifacts/d && ln -s / /logs/artifacts/d/root\n"
                                    "find /logs/artifacts -type l | wc -l > /logs/agent/links.txt\ntouch /app/ok\n"),
    "replace-bash": dict(toml='artifacts = ["/app/answer.txt"]\n[verifier]\nenvironment_mode = "separate"\n' + SMALL,
                         solve="echo wrong > /app/answer.txt\nprintf '#!/bin/sh\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > /bin/bash.new && mv /bin/bash.new $(readlink -f /bin/bash)\n"
                               "head -c 9 $(readlink -f /bin/bash) > /logs/agent/bash-head.txt\n",
                         test="mkdir -p /logs/verifier; [ \"$(cat /app/answer.txt)\" = right ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"),
    "kill-pid1": dict(toml=SMALL, solve="touch /app/ok\nkill -9 1\necho $? > /logs/artifacts/kill.txt\nsleep 30\n"),
    "background": dict(toml="[verifier]\nenvironment_mode = \"snapshot\"\n" + SMALL,
                       solve="(while :; do date >> /app/late; sleep 0.2; done) &\nsleep 1\ntouch /app/ok\n"
                             "kill -0 $! && wc -l < /app/late > /logs/agent/writer-lines.txt\n",
                       test="mkdir -p /logs/verifier; a=$(wc -l < /app/late); sleep 1.5; b=$(wc -l < /app/late)\n[ \"$a\" = \"$b\" ] && [ -e /app/ok ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"),
    "stubborn": dict(toml="[agent]\ntimeout_sec = 3\n" + SMALL, solve="touch /app/ok\ntrap '' TERM\ntrap -p TERM > /logs/agent/trap.txt\nwhile :; do sleep 1; done\n"),
    "egress": dict(toml='[relay]\nenabled = true\n[environment]\ncpus = 0.5\nnetwork_mode = "none"\n',
                   solve="""
                       python3 - <<'PY'
                       import socket, subprocess
                       s = socket.socket(); s.settimeout(2)
                       open("/logs/agent/target.txt", "w").write("1.1.1.1:443")
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
    "verifier-hang": dict(toml="[verifier]\ntimeout_sec = 3\n" + SMALL, test="echo sleeping\nsleep 600\n"),
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


def test_a_memory_hog_is_oom_and_still_graded(matrix):
    _, t, _ = matrix
    result, folder = t["hog"]
    assert (folder / "artifacts/hog-exit.txt").read_text().strip() == "137"  # positive control: SIGKILLed
    assert result.failure_mode == "oom" and result.verifier_exit_code == 0


def test_a_fork_bomb_meets_the_pids_limit_and_times_out(matrix):
    _, t, _ = matrix
    result, folder = t["forkbomb"]
    # positive control: the bomb ran into the limit (bash says so when a fork fails)
    assert "fork: " in (folder / "agent/stderr.txt").read_text()
    assert result.failure_mode == "agent_timeout" and result.limits.pids_limit == 64


def test_a_workdir_filler_is_held_to_storage_mb(matrix):
    _, t, _ = matrix
    result, folder = t["fill-workdir"]
    assert "No space left on device" in (folder / "artifacts/dd.txt").read_text()  # positive control
    assert result.reward["bytes"] <= 64 * 1024 * 1024
    FIGURES["fill_workdir_bytes_kept"] = int(result.reward["bytes"])


def test_a_writable_layer_filler_is_disk_limit(matrix):
    _, t, _ = matrix
    result, folder = t["fill-layer"]
    # positive control: it wrote its 64 MB (16 MB files, each counted once whole) and was
    # killed on the way past them: 4 whole files and the 5th cut short is a kill at 64-80 MB
    # (a loaded host's watchdog may be that quick); disk_limit says it went past
    assert int((folder / "artifacts/written-16mb.txt").read_text()) * 16 >= 64
    assert result.failure_mode == "disk_limit"
    FIGURES["fill_layer_seconds_to_kill"] = result.timings.agent


def test_a_cpu_spinner_is_held_to_its_share(matrix):
    _, t, _ = matrix
    result, folder = t["spinner"]
    assert (folder / "artifacts/spun.txt").read_text().split() == ["124", "124"]  # positive control: both spun 4 s
    if OCI_RUNTIME == "runsc":  # gVisor's kernel mounts no cgroupfs inside: the share cannot be
        assert result.limits.nano_cpus == 500_000_000  # read there; the host cgroup has it
        return
    share = float((folder / "artifacts/share.txt").read_text())
    assert share <= 0.6, share  # cpus = 0.5 holds (two loops unheld would take 2.0)
    FIGURES["spinner_cpu_share_at_0.5"] = round(share, 3)


def test_a_2gb_output_flood_is_capped_and_the_host_stays_flat(matrix):
    _, t, _ = matrix
    flood, folder = t["flood"]
    sizes = {n: (folder / "agent" / n).stat().st_size for n in ("stdout.txt", "stderr.txt")}
    FIGURES["flood_bytes_kept"] = sum(sizes.values())
    if OCI_RUNTIME == "runsc":  # 2 GB through gVisor's kernel does not finish in the 120 s
        # positive control: more than the caps keep was written (each file kept whole to its cap)
        assert sizes["stdout.txt"] == 16 * 1024 * 1024, sizes
        assert flood.failure_mode == "agent_timeout"  # (tests/hostile/README.md, under gVisor)
    else:
        # positive control: all 1 GiB went out on each stream (head and tr both exited 0)
        for stream in ("stdout", "stderr"):
            assert (folder / f"artifacts/{stream}-sent.txt").read_text().split() == ["0", "0"], stream
        assert flood.reward == {"reward": 1.0}
    assert sum(sizes.values()) <= 32 * 1024 * 1024
    assert flood.collected["/logs/agent"].truncated is True
    assert FIGURES["orchestrator_rss_growth_mb"] < 200


def test_thousands_of_files_are_all_collected(matrix):
    _, t, _ = matrix
    result, folder = t["many-files"]
    assert (folder / "agent/made.txt").read_text().strip() == "5000"  # positive control
    assert result.collected["/logs/artifacts"].files == 5000


def test_a_2gb_artifact_is_cut_at_the_collect_cap(matrix):
    _, t, _ = matrix
    result, folder = t["big-artifact"]
    assert (folder / "agent/size.txt").read_text().strip() == str(2 * 1024 ** 3)  # positive control
    big = result.collected["/logs/artifacts"]
    assert big.truncated is True and big.bytes <= 256 * 1024 * 1024
    FIGURES["big_artifact_bytes_kept"] = big.bytes


def test_links_out_of_the_artifacts_are_never_materialised(matrix):
    _, t, root = matrix
    result, folder = t["links"]
    assert (folder / "agent/links.txt").read_text().strip() == "3"  # positive control: 3 links made
    assert not any(p.is_symlink() for p in (folder / "artifacts").rglob("*"))
    assert result.collected["/logs/artifacts"].rejected == 3
    outside = [p for p in root.parent.iterdir() if p.name in ("passwd", "root")]
    assert outside == []


def test_a_replaced_bash_does_not_grade_a_separate_trial(matrix):
    _, t, _ = matrix
    result, folder = t["replace-bash"]
    assert (folder / "agent/bash-head.txt").read_text() == "#!/bin/sh"  # positive control: bash is the forger
    assert result.reward == {"reward": 0.0}


def test_killing_pid_1_still_gets_the_trial_graded(matrix):
    _, t, _ = matrix
    result, folder = t["kill-pid1"]
    if OCI_RUNTIME == "runsc":  # the sandbox stops with it: test.sh ran in the container restarted
        assert result.verifier_note and "restarted" in result.verifier_note  # positive control
    else:  # the kernel ignores SIGKILL to a namespace's init from inside it: sent, no effect
        assert (folder / "artifacts/kill.txt").read_text().strip() == "0"  # positive control: sent
    assert result.verifier_exit_code == 0 and result.reward == {"reward": 1.0}


def test_a_background_writer_is_stopped_before_grading(matrix):
    _, t, _ = matrix
    result, folder = t["background"]
    # positive control: the writer was alive and writing when the agent's command ended
    assert int((folder / "agent/writer-lines.txt").read_text()) >= 3
    assert result.reward == {"reward": 1.0}  # nothing it left kept writing during grading


def test_an_agent_ignoring_sigterm_is_killed_at_its_timeout(matrix):
    _, t, _ = matrix
    result, folder = t["stubborn"]
    assert (folder / "agent/trap.txt").read_text().strip() == "trap -- '' SIGTERM"  # positive control
    assert result.failure_mode == "agent_timeout"
    # Hang guard only: killed ~8 s in (3 s, then timeout -k 5); an agent never killed runs forever
    assert result.timings.agent < 90


def test_a_no_network_trial_reaches_no_outside_address(matrix):
    _, t, _ = matrix
    result, folder = t["egress"]
    # positive control: it tried 1.1.1.1:443, with a working network (its relay answered)
    assert (folder / "agent/target.txt").read_text() == "1.1.1.1:443"
    assert (folder / "artifacts/egress.txt").read_text().endswith(" relay=0")
    assert (folder / "artifacts/egress.txt").read_text() == "blocked relay=0"
    assert result.reward == {"reward": 1.0}


def test_the_agent_stack_is_read_only(matrix):
    _, t, _ = matrix
    result, folder = t["stack-readonly"]
    err = (folder / "artifacts/err.txt").read_text()
    assert "/opt/orchestra/bin/mem" in err  # positive control: the write was tried
    assert "Read-only file system" in err and result.reward == {"reward": 1.0}


def test_a_non_root_agent_runs_as_that_user(matrix):
    _, t, _ = matrix
    result, folder = t["nonroot"]
    uid = (folder / "artifacts/uid.txt").read_text().strip()
    assert uid  # positive control: the agent ran and recorded its uid
    assert uid == "65534" and result.reward == {"reward": 1.0}


@pytest.mark.parametrize("name, written, fragment", [
    ("reward-notjson", "not json\n", "not JSON"), ("reward-list", "[1, 2]\n", "flat map"),
    ("reward-nan", '{"reward": NaN}\n', "not finite"), ("reward-string", '{"reward": "lots"}\n', "not a number")])
def test_bad_reward_files_are_a_verifier_error_with_the_reason(matrix, name, written, fragment):
    _, t, _ = matrix
    result, folder = t[name]
    assert (folder / "verifier/reward.json").read_text() == written  # positive control: test.sh wrote it
    assert result.failure_mode == "verifier_error" and result.reward is None
    assert fragment in result.error


def test_a_hanging_verifier_is_verifier_timeout(matrix):
    _, t, _ = matrix
    result, folder = t["verifier-hang"]
    assert (folder / "verifier/test-stdout.txt").read_text() == "sleeping\n"  # positive control: it began
    assert result.failure_mode == "verifier_timeout"


def test_an_unbuildable_task_is_build_error_alone(matrix):
    _, t, _ = matrix
    result, _ = t["unbuildable"]
    # positive control: its `RUN exit 9` ran and exited 9 (the classic builder's words; BuildKit's)
    assert "exit 9" in result.error and ("non-zero code: 9" in result.error or "exit code: 9" in result.error), result.error
    assert result.failure_mode == "build_error"


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
    make_task(tmp_path / "ds", "shared-relay", solve='echo "${#ORCHESTRA_PRIVATE_KEY}" > /logs/agent/key-length.txt\ntouch /app/ok\n',
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
    # positive control: the agent had its key (64 hex characters), and the watcher read the
    # verifier container's environment
    (folder,) = (tmp_path / "jobs/keys/trials").iterdir()
    assert (folder / "agent/key-length.txt").read_text().strip() == "64" and envs
    assert job.mean_reward == 1.0
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
        # --build-ahead 0: trials in the job's order (a-small's result is written before b-huge
        # fills the disk); with the build pool, cold tasks start in their builds' finishing order
        proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-n", "1",
                               "--build-ahead", "0", "--jobs-dir", str(mount), "--job-name", "full", "-q"],
                              capture_output=True, text=True, timeout=300)
        free = os.statvfs(mount)
        assert free.f_bavail * free.f_frsize < 1024 * 1024  # positive control: the job's disk is full
        assert proc.returncode == 3, proc.stderr
        assert "no space left" in proc.stderr and "Traceback" not in proc.stderr
        written = json.loads(next((mount / "full/trials").glob("a-small__*/result.json")).read_text())
        assert written["reward"] == {"reward": 1.0}
        assert orchestra_objects(runtime) == ([], [])
    finally:
        subprocess.run(["umount", "-l", str(mount)])


def test_an_unreachable_engine_exits_3(tmp_path):
    make_task(tmp_path / "ds", "t")
    with pytest.raises(ConnectionRefusedError):  # positive control: nothing answers there
        socket.create_connection(("127.0.0.1", 9), timeout=5)
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

