"""Quotas hold on the real engine, and each breach ends only its own trial, with the
right failure mode."""

from __future__ import annotations

import threading
import time

from conftest import by_task, make_task, orchestra_objects, run


def test_applied_limits_read_back_from_docker_equal_the_task(runtime, tmp_path):
    make_task(tmp_path / "ds", "limits", toml="""
        [agent]
        timeout_sec = 60
        [verifier]
        environment_mode = "separate"
        [environment]
        cpus = 0.5
        memory_mb = 300
        pids_limit = 77
        storage_mb = 128
        network_mode = "none"
    """, solve="""
        cat /sys/fs/cgroup/memory/memory.limit_in_bytes > /logs/artifacts/mem
        cat /sys/fs/cgroup/pids/pids.max > /logs/artifacts/pids
        df -m /app | tail -1 | awk '{print $2}' > /logs/artifacts/app_mb
    """, test="""
        mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt
    """)
    _, (trial,) = run(runtime, tmp_path / "ds", tmp_path / "jobs")
    limits = trial.limits
    assert limits.nano_cpus == 500_000_000
    assert limits.memory_bytes == 300 * 1024 * 1024
    assert limits.memswap_bytes == limits.memory_bytes  # no swap beyond the memory limit
    assert limits.pids_limit == 77
    assert limits.init is True
    assert "no-new-privileges:true" in limits.security_opt
    assert {"NET_RAW", "MKNOD", "SYS_CHROOT", "SETFCAP", "AUDIT_WRITE"} <= set(limits.cap_drop)
    assert limits.network_internal is True
    assert limits.storage_enforcement == "loop-volume+watchdog"
    artifacts = tmp_path / "jobs" / trial.job / "trials"
    (folder,) = list(artifacts.iterdir())
    # ... and what the agent sees from inside agrees.
    assert int((folder / "artifacts" / "mem").read_text()) == 300 * 1024 * 1024
    assert int((folder / "artifacts" / "pids").read_text()) == 77
    assert 100 <= int((folder / "artifacts" / "app_mb").read_text()) <= 128


def test_memory_hog_is_oom_and_a_fork_bomb_ends_only_its_own_trial(runtime, tmp_path):
    ds = tmp_path / "ds"
    make_task(ds, "hog", toml="""
        [agent]
        timeout_sec = 60
        [environment]
        memory_mb = 128
    """, solve="""
        python3 -c "x = b'a' * (4 * 128 * 1024 * 1024); print(len(x))"
        touch /app/ok
    """)
    make_task(ds, "forkbomb", toml="""
        [agent]
        timeout_sec = 8
        [environment]
        pids_limit = 64
    """, solve="""
        bomb() { bomb | bomb & }; bomb
        sleep 30
    """)
    make_task(ds, "bystander", solve="touch /app/ok")
    _, trials = run(runtime, ds, tmp_path / "jobs", n=3)
    t = by_task(trials)
    assert t["hog"].failure_mode == "oom"
    assert t["hog"].limits.memory_bytes == 128 * 1024 * 1024
    assert t["hog"].verifier_exit_code == 0  # grading still ran
    assert t["forkbomb"].failure_mode == "agent_timeout"
    assert t["forkbomb"].limits.pids_limit == 64
    assert t["bystander"].failure_mode == "none" and t["bystander"].reward == {"reward": 1.0}
    assert orchestra_objects(runtime) == ([], [])


def test_agent_past_its_timeout_is_killed_within_timeout_plus_10s_and_still_graded(runtime, tmp_path):
    timeout = 4
    make_task(tmp_path / "ds", "sleeper", toml=f"""
        [agent]
        timeout_sec = {timeout}
    """, solve="""
        touch /app/ok
        trap '' TERM
        (trap '' TERM; sleep 600) &
        sleep 600
    """)
    seen: list[float] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            rows = runtime.api.containers(filters={"label": ["orchestra.kind=agent",
                                                             "orchestra.job=stubborn"]})
            if rows:
                seen.append(time.monotonic())
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _, (trial,) = run(runtime, tmp_path / "ds", tmp_path / "jobs", name="stubborn")
    finally:
        stop.set()
        watcher.join()
    assert trial.failure_mode == "agent_timeout"
    assert trial.verifier_exit_code == 0 and trial.reward == {"reward": 1.0}  # verifier ran
    assert seen, "the agent container was never seen running"
    # the contract itself (DESIGN 2.6: stopped at its deadline by `timeout -k` and the
    # watchdog), with the 10 s kill grace as the margin; the agent would sleep far longer
    assert seen[-1] - seen[0] <= timeout + 10
    assert trial.timings.agent <= timeout + 10


def test_verifier_past_its_timeout_is_verifier_timeout(runtime, tmp_path):
    make_task(tmp_path / "ds", "slowtest", toml="""
        [verifier]
        timeout_sec = 3
    """, solve="touch /app/ok", test="sleep 600\n")
    started = time.monotonic()
    _, (trial,) = run(runtime, tmp_path / "ds", tmp_path / "jobs")
    assert trial.failure_mode == "verifier_timeout"
    assert trial.reward is None
    # hang guards: test.sh sleeps 600 s; stopped at its 3 s timeout, the verifier takes ~4 s
    assert trial.timings.verify < 3 + 10
    assert time.monotonic() - started < 60


def test_disk_fillers_are_stopped_at_storage_mb(runtime, tmp_path):
    ds = tmp_path / "ds"
    # In the workdir (the loop volume): writes stop with ENOSPC at the quota.
    make_task(ds, "fill-workdir", toml="""
        [environment]
        storage_mb = 64
    """, solve="""
        dd if=/dev/zero of=/app/fill bs=1M count=256 2>/logs/agent/dd.txt
        echo $? > /logs/agent/dd_exit
    """, test="""
        mkdir -p /logs/verifier
        size=$(stat -c %s /app/fill)
        echo "{\\"reward\\": 1, \\"fill_bytes\\": $size}" > /logs/verifier/reward.json
    """)
    # Elsewhere (the writable layer): the watchdog kills the container.
    make_task(ds, "fill-layer", toml="""
        [agent]
        timeout_sec = 120
        [environment]
        storage_mb = 64
    """, solve="""
        for i in $(seq 1 200); do dd if=/dev/zero of=/var/tmp/fill$i bs=1M count=16 2>/dev/null; sleep 0.2; done
        touch /app/ok
    """)
    _, trials = run(runtime, ds, tmp_path / "jobs", n=2)
    t = by_task(trials)
    assert t["fill-workdir"].reward["fill_bytes"] <= 64 * 1024 * 1024
    assert t["fill-workdir"].agent_exit_code == 0  # the script ran on; dd itself failed
    assert t["fill-layer"].failure_mode == "disk_limit"
    assert t["fill-layer"].timings.agent < 60  # stopped long before its 200 x 16 MB
    assert t["fill-layer"].reward == {"reward": 0.0}  # never reached `touch /app/ok`
