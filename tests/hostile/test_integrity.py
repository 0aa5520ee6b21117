"""Honest numbers under hostile and broken agents (issue 11), on the real engine.

One job holds the hostile cases (each a task whose solution/solve.sh is the behaviour, run
by the oracle agent) beside bystander trials; while it runs, the orchestrator's threads and
RSS are sampled. The other tests need their own job (a leak stops a suite; a retry, a
cancel and a resume need their own set-up). tests/hostile/README.md tabulates the figures.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from conftest import make_leaky_task, make_task, nothing_left, wait_for
from docker.errors import APIError
from kit import OCI_RUNTIME, model_endpoint, rss_mb, trials_by_task
from parts import close_listener

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import Manifest, default_manifest
from orchestrator.models.result import TrialResult
from orchestrator.runtime.client import EngineClient
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.scrub import REDACTED
from orchestrator.tasks.load import load_tasks

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
FIGURES: dict[str, object] = {}
SMALL = "[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 256\n"
RELAY = "[relay]\nenabled = true\n" + SMALL
REWARD_OK = "mkdir -p /logs/verifier; if [ -e /app/ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
HOST_PORT_FILE = "host-port"

WINDOW_SEC = 8  # each bystander measures, and each flood presses, this long

RELAY_FLOOD = r"""
python3 - <<'PY'
import json, os, socket, subprocess, time, urllib.parse
url = urllib.parse.urlsplit(os.environ["ORCHESTRA_RELAY_URL"])
addr = (url.hostname, url.port)

def raw(request):
    s = socket.create_connection(addr, timeout=5)
    s.sendall(request)
    try:
        head = s.recv(200).split(b"\r\n")[0].decode(errors="replace")
    except OSError as exc:
        head = f"error {exc}"
    s.close()
    return head

out = {}
out["negative"] = raw(b"POST /v1/engrams HTTP/1.1\r\nHost: r\r\nContent-Length: -5\r\n\r\n")
out["abc"] = raw(b"POST /v1/engrams HTTP/1.1\r\nHost: r\r\nContent-Length: abc\r\n\r\n")
out["chunked"] = raw(b"POST /v1/engrams HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
out["huge"] = raw(b"POST /v1/engrams HTTP/1.1\r\nHost: r\r\nContent-Length: 50000000\r\n\r\n")
out["limit0"] = subprocess.run(["chan", "read", "--limit", "0"], capture_output=True, text=True).stderr[-200:]
busy, held_max, end = 0, 0, time.monotonic() + WINDOW
while time.monotonic() < end:  # idle connections: the relay keeps a bounded number, refuses the rest
    held = []
    for _ in range(300):
        try:
            held.append(socket.create_connection(addr, timeout=2))
        except OSError:
            busy += 1
    held_max = max(held_max, len(held))
    time.sleep(0.5)
    for s in held:
        s.settimeout(0.2)
        try:
            if s.recv(100).startswith(b"HTTP/1.1 503"):
                busy += 1
        except OSError:
            pass
    for s in held:
        s.close()
out["refused_or_503"], out["held_max"] = busy, held_max
time.sleep(1)
out["whoami_after"] = subprocess.run(["chan", "whoami"], capture_output=True).returncode
json.dump(out, open("/logs/artifacts/flood.json", "w"))
PY
touch /app/ok
""".replace("WINDOW", str(WINDOW_SEC))

BYSTANDER = r"""
python3 - <<'PY'
import json, sys, time
sys.path.insert(0, "/opt/orchestra/lib")
from orchestra_client import Client
client, times = Client(), []
end = time.monotonic() + WINDOW
while time.monotonic() < end:
    t = time.monotonic()
    client.whoami()
    times.append(time.monotonic() - t)
    time.sleep(0.02)
times.sort()
json.dump({"p95": times[int(0.95 * len(times)) - 1], "median": times[len(times) // 2], "n": len(times)},
          open("/logs/artifacts/latency.json", "w"))
PY
touch /app/ok
""".replace("WINDOW", str(WINDOW_SEC))

# The model proxy's flood, in two parts that cannot get in each other's way: BODY_THREADS
# connections (well under the 16-connection cap, so every body reaches the byte budget)
# post the costliest body back to back for the window, each call's status and times
# recorded; then 300 connections at once for the connection cap.
BODY_THREADS = 3
PROXY_FLOOD = r"""
python3 - <<'PY'
import json, os, socket, threading, time, urllib.error, urllib.parse, urllib.request
base, token = os.environ["ORCHESTRA_MODEL_URL"], os.environ["ORCHESTRA_MODEL_TOKEN"]
url = urllib.parse.urlsplit(base)
addr, path = (url.hostname, url.port), (url.path + "/chat/completions").encode()
auth = b"Authorization: Bearer " + token.encode() + b"\r\n"

def raw(head):
    s = socket.create_connection(addr, timeout=5)
    s.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: p\r\n" + head + b"\r\n")
    try:
        line = s.recv(200).split(b"\r\n")[0].decode(errors="replace")
    except OSError as exc:
        line = f"error {exc}"
    s.close()
    return line

def call(body):
    req = urllib.request.Request(base + "/chat/completions", data=body, method="POST",
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return str(r.status)
    except urllib.error.HTTPError as exc:  # 429 for the byte rate names it (KiB/s)
        return "429" if exc.code == 429 and b"KiB/s" in exc.read() else f"{exc.code} other"
    except OSError as exc:
        return "error " + str(exc)[:80]

out = {}
out["negative"] = raw(auth + b"Content-Length: -5\r\n")
out["abc"] = raw(auth + b"Content-Length: abc\r\n")
out["chunked"] = raw(auth + b"Transfer-Encoding: chunked\r\n")
out["huge"] = raw(auth + b"Content-Length: 50000000\r\n")
out["no_token_huge"] = raw(b"Content-Length: 50000000\r\n")
# the costliest body under the 2 MiB cap: tiny JSON values (ten times its size once decoded)
tiny = json.dumps({"messages": [{"role": "user", "content": "x"}] * 60000}).encode()
calls, start = [], threading.Barrier(THREADS)
def press():
    start.wait()
    while time.monotonic() < end:
        began = time.monotonic()
        calls.append((call(tiny), began, time.monotonic(), len(tiny)))
end = time.monotonic() + WINDOW
workers = [threading.Thread(target=press) for _ in range(THREADS)]
for w in workers:
    w.start()
for w in workers:
    w.join()
statuses = [c[0] for c in calls]
out["bodies"] = {k: statuses.count(k) for k in set(statuses)}
out["body_bytes"] = len(tiny)
# the bytes of the bodies that reached the byte budget (answered, or told 429 for the rate)
out["bodies_sent_bytes"] = sum(c[3] for c in calls if c[0] in ("200", "429"))
out["bodies_span_sec"] = max(c[2] for c in calls) - min(c[1] for c in calls) if calls else 0
held, failed = [], 0
for _ in range(300):
    try:
        held.append(socket.create_connection(addr, timeout=2))
    except OSError:
        failed += 1
time.sleep(1)
told_503 = 0
for s in held:
    s.settimeout(0.2)
    try:
        told_503 += s.recv(100).startswith(b"HTTP/1.1 503")
    except OSError:
        pass
for s in held:
    s.close()
out["connections"] = {"attempted": 300, "connected": len(held), "failed": failed, "told_503": told_503}
# a normal call once the flood has drained: the closed connections leave the cap as the
# proxy reads their ends, the byte debt (at most 5 s) runs out; until then it is refused
# (503 or 429, or a broken pipe when the refusal comes before the body is sent: cc80)
recovering = time.monotonic()
while True:
    out["ok_after"] = call(json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode())
    if out["ok_after"] == "200" or time.monotonic() - recovering > 20:
        break
    time.sleep(0.2)
out["ok_after_sec"] = round(time.monotonic() - recovering, 2)
json.dump(out, open("/logs/artifacts/flood.json", "w"))
PY
touch /app/ok
""".replace("WINDOW", str(WINDOW_SEC)).replace("THREADS", str(BODY_THREADS))


@pytest.fixture(scope="module", autouse=True)
def _nothing_left_after_this_module(runtime):
    """Rerunning the hostile matrix leaves no labelled object and no loop device (issue 11)."""
    yield
    assert nothing_left(runtime) == {}


def cases(host_port: int) -> dict[str, dict]:
    return {
        "bad-recall": dict(solve="""
            echo '{"seq": 1, "memory_recall": {"hits": [], "used_chars": "lots", "suppressed": -3}}' > /logs/agent/trajectory.jsonl
            touch /app/ok
        """),
        "post-key": dict(toml=RELAY, solve="""
            echo "${#ORCHESTRA_PRIVATE_KEY}" > /logs/agent/key-length.txt
            chan post "my key is KEY=$ORCHESTRA_PRIVATE_KEY"
            echo "KEY=$ORCHESTRA_PRIVATE_KEY TAG=$ORCHESTRA_AUTH_TAG"
            echo "REV=$(echo "$ORCHESTRA_PRIVATE_KEY" | rev)" > /logs/artifacts/key.txt
            python3 -c "import urllib.request, os; urllib.request.urlopen(os.environ['ORCHESTRA_RELAY_URL'] + '/v1/nothing?k=' + os.environ['ORCHESTRA_PRIVATE_KEY'], timeout=5)" || true
            touch /app/ok
        """),
        "long-name": dict(solve="""
            echo fine > /logs/artifacts/normal.txt
            cd /logs/artifacts; n=$(printf 'd%.0s' $(seq 200))
            for i in $(seq 40); do mkdir $n && cd $n; done; echo deep > file
            echo "$PWD" | wc -c > /logs/agent/path-length.txt
            touch /app/ok
        """),
        "exit-124": dict(solve="touch /app/ok\nexit 124\n"),
        "many-files": dict(toml=SMALL, solve="""
            cd /logs/artifacts && python3 -c "[open(f'f{i}', 'w').write('x') for i in range(30000)]"
            ls /logs/artifacts | wc -l > /logs/agent/made.txt
            touch /app/ok
        """),
        "verifier-disk": dict(toml="[verifier]\ntimeout_sec = 120\n[environment]\ncpus = 0.5\nstorage_mb = 64\n",
                              solve="touch /app/ok\n",
                              test="mkdir -p /logs/verifier; for i in $(seq 64); do dd if=/dev/zero of=/var/tmp/f$i bs=1M count=16 2>/dev/null;"
                                   " echo $i > /logs/verifier/written-16mb.txt; sleep 0.1; done\n" + REWARD_OK),
        "host-probe": dict(toml='[relay]\nenabled = true\n[environment]\ncpus = 0.5\nnetwork_mode = "none"\n',
                           solve=f"""
            python3 - <<'PY'
            import socket, subprocess
            res = []
            open("/logs/agent/target.txt", "w").write("172.17.0.1:{host_port}")
            for host in ("172.17.0.1",):
                s = socket.socket(); s.settimeout(3)
                try:
                    s.connect((host, {host_port})); res.append("open")
                except OSError:
                    res.append("blocked")
            relay = subprocess.run(["chan", "whoami"], capture_output=True).returncode
            open("/logs/artifacts/probe.txt", "w").write(" ".join(res) + f" relay={{relay}}")
            PY
            grep -q "^blocked relay=0$" /logs/artifacts/probe.txt && touch /app/ok
        """),
        "relay-flood": dict(toml=RELAY, solve=RELAY_FLOOD),
        "proxy-flood": dict(solve=PROXY_FLOOD),
        "bystander-a": dict(toml=RELAY, solve=BYSTANDER),
        "bystander-b": dict(toml=RELAY, solve=BYSTANDER),
    }


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


FIRST = ("bystander-a", "bystander-b", "relay-flood", "proxy-flood")  # the first wave, together
FD_LIMIT = 1024  # `ulimit -n 1024`: one trial's flood must not starve the job of files


@pytest.fixture(scope="module")
def upstream():
    """Every trial gets a model proxy in front of an out-of-process endpoint; the oracle
    never calls it, the proxy-flood agent does."""
    with model_endpoint() as endpoints:
        yield endpoints


@pytest.fixture(scope="module")
def integrity(runtime, upstream, tmp_path_factory):
    root = tmp_path_factory.mktemp("integrity")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("172.17.0.1", 0))  # a host service a trial must not reach
    listener.listen(16)
    for name, case in cases(listener.getsockname()[1]).items():
        make_task(root / "ds", name, toml=case.get("toml", SMALL), solve=case.get("solve", "true\n"),
                  test=case.get("test", REWARD_OK))
    manifest = Manifest.model_validate({"condition": "hostile", "roster": [
        {"id": "lead", "kind": "orchestrator", "agent": "oracle", "endpoint": "upstream"}]})
    endpoints = upstream
    tasks = sorted(load_tasks(root / "ds"), key=lambda t: t.name.split("/")[-1] not in FIRST)
    # The quiet baseline: the two bystanders alone, same images, same machine.
    quiet = [t for t in tasks if t.name.split("/")[-1].startswith("bystander")]
    run_job(runtime, quiet, manifest, JobOptions(job_name="integrity-quiet", jobs_dir=root / "jobs",
                                                 n_concurrent=4, endpoints=endpoints))
    samples = {"threads": threading.active_count(), "rss": rss_mb(), "fds": _fds()}
    baseline = dict(samples)
    stop = threading.Event()

    def sample():
        while not stop.wait(0.1):
            samples["threads"] = max(samples["threads"], threading.active_count())
            samples["rss"] = max(samples["rss"], rss_mb())
            samples["fds"] = max(samples["fds"], _fds())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    options = JobOptions(job_name="integrity", jobs_dir=root / "jobs", n_concurrent=4, max_retries=2,
                         endpoints=endpoints, oci_runtime=OCI_RUNTIME)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(FD_LIMIT, hard), hard))
    try:
        job = run_job(runtime, tasks, manifest, options)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        stop.set()
        sampler.join()
        listener.close()
    FIGURES["orchestrator_threads_peak"] = samples["threads"]
    FIGURES["orchestrator_threads_before"] = baseline["threads"]
    FIGURES["orchestrator_rss_growth_mb"] = round(samples["rss"] - baseline["rss"], 1)
    FIGURES["orchestrator_fds_peak"] = samples["fds"]
    trials = trials_by_task(root / "jobs/integrity")
    for name, (r, folder) in trials_by_task(root / "jobs/integrity-quiet").items():
        trials[f"quiet-{name}"] = (r, folder)
    yield job, trials, root
    print("\nintegrity figures: " + json.dumps(FIGURES, sort_keys=True))


def test_every_trial_is_graded_once_and_nothing_is_retried(integrity, runtime):
    job, t, _ = integrity
    assert job.n_trials == 11 and len(t) == 13  # and the quiet job's two bystanders
    assert {name: r.retries for name, (r, _) in t.items() if r.retries} == {}
    assert {name for name, (r, _) in t.items() if r.failure_mode in ("infra_error", "launch_error")} == set()
    assert runtime.labelled("orchestra.job=integrity") == ([], [], [])


def test_bystanders_are_graded_and_the_orchestrator_stays_bounded(integrity):
    _, t, _ = integrity
    for name in ("bystander-a", "bystander-b"):
        loud, quiet = (json.loads((t[n][1] / "artifacts/latency.json").read_text())
                       for n in (name, f"quiet-{name}"))
        assert t[name][0].reward == {"reward": 1.0}, t[name][0].error
        FIGURES[f"{name}_relay_p95_s"] = round(loud["p95"], 4)
        FIGURES[f"{name}_relay_p95_quiet_s"] = round(quiet["p95"], 4)
        assert loud["n"] >= 50 and quiet["n"] >= 50
        # Beside both floods a bystander's relay still answers. Hang guard only: a starved
        # relay takes seconds or refuses (the test reads n >= 50 answers above); its p95 is
        # a few ms quiet, so 2 s is hundreds of times that. How close it stays to quiet is a
        # speed figure, bench's bystander_relay_p95_ratio (target <= 2x), not a test's.
        assert loud["p95"] < 2.0, (loud, quiet)
    # the floods ran while the bystanders measured (the first wave of four)
    for name in FIRST:
        assert t[name][0].timings.agent > WINDOW_SEC - 1, name
    # 4 trials at a time, each relay and proxy at most 16 connection threads plus its own
    assert FIGURES["orchestrator_threads_peak"] <= FIGURES["orchestrator_threads_before"] + 4 * 2 * 17 + 30
    # Peak growth, bounded by what is admitted, not by what is offered (~480 MB): the flood's
    # 3 connections each hold at most one 2 MB body (MAX_REQUEST), ~20 MB once decoded, plus
    # thread stacks, exchange records and each trial's ATIF. Measured 53-57 MB (35-40 MB
    # before the proxy kept each API's own request beside the chat pair and ATIF was built
    # at collection; 83-115 MB while ATIF read a whole exchanges file at once). The build
    # pool (on by default) adds its two builders' streams beside the trials: cold, alone,
    # 64.7-73.3 MB with it and 60.4 MB without (issue 48's stop), 100.6 MB once in a two-worker
    # run of the hostile folder; 2 x 10 MB is allowed for them.
    assert FIGURES["orchestrator_rss_growth_mb"] <= 3 * 22 + 30 + 2 * 10
    assert FIGURES["orchestrator_fds_peak"] < FD_LIMIT // 2  # the job ran under ulimit -n 1024


def test_a_proxy_flood_is_refused_clearly_and_costs_the_orchestrator_little(integrity):
    _, t, _ = integrity
    result, folder = t["proxy-flood"]
    flood = json.loads((folder / "artifacts/flood.json").read_text())
    FIGURES["proxy_flood_bodies"] = flood["bodies"]
    FIGURES["proxy_flood_connections"] = flood["connections"]
    FIGURES["proxy_flood_connections_refused"] = result.model.connections_refused
    # Positive control, from what the flood itself counted: the bodies that reached the
    # byte budget (answered 200, or told 429 for the byte rate) in the window were more
    # than the budget can admit in it: a burst of one full body, 1 MiB/s for the window's
    # span, and at most 5 s of debt. On a busy machine the flood sends fewer bodies, and
    # this says so instead of the outcome below failing for want of a flood.
    body = flood["body_bytes"]
    assert 1.9e6 < body < 2 * 1024 * 1024
    admissible = 2 * 1024 * 1024 + 1024 * 1024 * (flood["bodies_span_sec"] + 5)  # bytes
    assert flood["bodies_sent_bytes"] > admissible, (admissible, flood)
    assert flood["connections"]["connected"] > 16, flood["connections"]  # more at once than the cap
    # Outcome: no more bodies admitted than the budget allows, every other one told 429 for
    # the byte rate (nothing else: no close, no other status), and the proxy counted them
    bodies = flood["bodies"]
    assert set(bodies) == {"200", "429"}, bodies
    assert bodies["200"] * body <= admissible and result.model.body_rate_refused == bodies["429"], (bodies, result.model)
    # past the connection cap: 503 at once, counted
    assert 1 <= flood["connections"]["told_503"] <= result.model.connections_refused, (flood, result.model)
    # the bad framings: each refused before its body is read (the token before the body)
    assert flood["negative"].startswith("HTTP/1.1 400") and flood["abc"].startswith("HTTP/1.1 400")
    assert flood["chunked"].startswith("HTTP/1.1 411") and flood["huge"].startswith("HTTP/1.1 413")
    assert flood["no_token_huge"].startswith("HTTP/1.1 401")
    # and the proxy answers a normal call again once the flood drained (its connections
    # closed, at most 5 s of byte debt: within 15 s), and the trial is graded
    FIGURES["proxy_recovered_sec"] = flood["ok_after_sec"]
    assert flood["ok_after"] == "200" and flood["ok_after_sec"] < 15, flood
    assert result.reward == {"reward": 1.0} and result.failure_mode == "none"
    assert result.model.calls >= bodies["200"]


def test_a_malformed_trajectory_value_makes_the_audit_incomplete_not_infra(integrity):
    _, t, _ = integrity
    result, folder = t["bad-recall"]
    # positive control: the malformed values reached the collected trajectory
    assert '"used_chars": "lots", "suppressed": -3' in (folder / "agent/trajectory.jsonl").read_text()
    assert result.failure_mode == "none" and result.reward == {"reward": 1.0}
    assert result.memory.complete is False
    assert "not a count" in result.memory.incomplete_reason


def test_a_posted_private_key_is_scrubbed_everywhere_and_recorded(integrity):
    _, t, root = integrity
    result, folder = t["post-key"]
    # positive control: the agent had a real key to leak (64 hex characters), and sent it
    # everywhere it tried (the lines below are there, with the key scrubbed out of them)
    assert (folder / "agent/key-length.txt").read_text().strip() == "64"
    assert "my key is KEY=" in (folder / "artifacts/relay-evidence.json").read_text()
    assert "KEY=" in (folder / "agent/stdout.txt").read_text() and (folder / "artifacts/key.txt").is_file()
    assert result.failure_mode == "none" and result.reward == {"reward": 1.0}
    assert result.relay.secret_leaked_by_agent == ["lead"]
    evidence = (folder / "artifacts/relay-evidence.json").read_text()
    assert f"KEY={REDACTED}" in evidence
    assert f"KEY={REDACTED} TAG={REDACTED}" in (folder / "agent/stdout.txt").read_text()
    assert (folder / "artifacts/key.txt").read_text().strip() == f"REV={REDACTED}"
    assert {"agent/stdout.txt", "artifacts/key.txt"} <= set(result.scrubbed_files)
    # The key never reached any file orchestra wrote, events.jsonl included: no 64-hex run
    # follows "KEY=" anywhere in the job folder.
    for path in (root / "jobs/integrity").rglob("*"):
        if path.is_file() and path.stat().st_size < 64 * 1024 * 1024:
            assert not re.search(rb"KEY=[0-9a-f]{32}", path.read_bytes()), path


def test_an_unwritable_artifact_name_is_rejected_alone(integrity):
    _, t, _ = integrity
    result, folder = t["long-name"]
    if OCI_RUNTIME != "runsc":  # positive control: the path it made is 8,000+ characters
        assert int((folder / "agent/path-length.txt").read_text()) > 8000
    # under gVisor bash's getcwd aborts past PATH_MAX (its kernel answers ERANGE where Linux
    # does not), so the agent's own script dies before `touch /app/ok`: reward 0, no failure
    assert result.failure_mode == "none" and result.reward == {"reward": 0.0 if OCI_RUNTIME == "runsc" else 1.0}
    if OCI_RUNTIME == "runsc":
        assert "__getcwd" in (folder / "agent/stderr.txt").read_text()
    assert result.collected["/logs/artifacts"].rejected >= 1
    assert (folder / "artifacts/normal.txt").read_text() == "fine\n"


def test_exit_124_after_a_second_is_not_a_timeout(integrity):
    _, t, _ = integrity
    result = t["exit-124"][0]
    assert result.agent_exit_code == 124  # positive control: it exited with timeout's code
    assert result.failure_mode == "none"
    assert result.reward == {"reward": 1.0} and result.agent_outcome == "crashed"


def test_file_counts_are_capped_as_well_as_bytes(integrity):
    _, t, _ = integrity
    result, folder = t["many-files"]
    assert (folder / "agent/made.txt").read_text().strip() == "30000"  # positive control
    collected = result.collected["/logs/artifacts"]
    # 30,000 files and their folder: 20,000 members extracted, the rest counted, not written
    assert collected.files + collected.skipped == 30000 and collected.truncated
    assert collected.files <= 20000 and collected.skipped >= 10000
    FIGURES["many_files_collect_seconds"] = result.timings.collect


def test_the_verifier_has_its_own_disk_quota_read_back(integrity):
    _, t, _ = integrity
    result, folder = t["verifier-disk"]
    # positive control: test.sh wrote more than its 64 MB (16 MB files, counted as it went)
    # (whole files: a kill during the 5th, at 64-80 MB, reads 4 x 16 = 64; the error below
    # says the quota stopped it past 64)
    assert int((folder / "verifier/written-16mb.txt").read_text()) * 16 >= 64
    assert result.failure_mode == "verifier_error" and "storage_mb=64" in result.error
    assert result.verifier_limits is not None and result.verifier_limits.storage_mb == 64
    assert result.verifier_limits.memory_bytes > 0 and result.verifier_limits.pids_limit > 0
    assert result.verifier_forgeable is True  # shared mode says so


def test_a_no_network_trial_reaches_its_relay_and_nothing_else_on_the_host(integrity):
    _, t, _ = integrity
    result, folder = t["host-probe"]
    # positive control: it tried the host's listener (and its relay answered: it has a network)
    assert (folder / "agent/target.txt").read_text().startswith("172.17.0.1:")
    assert (folder / "artifacts/probe.txt").read_text().endswith(" relay=0")
    assert (folder / "artifacts/probe.txt").read_text() == "blocked relay=0"
    assert result.reward == {"reward": 1.0} and result.limits.host_isolation == "iptables"


def test_relay_floods_and_bad_framing_get_clear_http_errors(integrity):
    _, t, _ = integrity
    result, folder = t["relay-flood"]
    flood = json.loads((folder / "artifacts/flood.json").read_text())
    assert flood["held_max"] > 16, flood  # positive control: more connections at once than the cap
    assert flood["negative"].startswith("HTTP/1.1 400") and flood["abc"].startswith("HTTP/1.1 400")
    assert flood["chunked"].startswith("HTTP/1.1 411") and flood["huge"].startswith("HTTP/1.1 413")
    assert "limit" in flood["limit0"]
    assert flood["refused_or_503"] > 0 and flood["whoami_after"] == 0
    assert result.relay.connections_refused > 0
    assert result.reward == {"reward": 1.0}
    FIGURES["relay_flood_connections_refused"] = result.relay.connections_refused


# ---- tests that need their own job -------------------------------------------------------
class FailFirstVerifier(DockerRuntime):
    """The real engine; the first verifier container's creation fails as the API would."""

    def __init__(self):
        super().__init__(max_pool_size=32)
        self.failed = False

    def create(self, spec):
        if spec.labels.get("orchestra.kind") == "verifier" and not self.failed:
            self.failed = True
            raise APIError("500 Server Error: injected: verifier create failed")
        return super().create(spec)


def test_a_retry_is_graded_from_its_own_files_and_keeps_the_earlier_try(tmp_path):
    make_task(tmp_path / "ds", "once", toml='[verifier]\nenvironment_mode = "separate"\n' + SMALL,
              solve="""
                n=$(cat /proc/sys/kernel/random/uuid)
                echo "$n" > /logs/artifacts/$n
                echo '{"seq": 1, "event": {"kind": "text", "text": "'$n'"}}' > /logs/agent/trajectory.jsonl
              """,
              test="mkdir -p /logs/verifier; [ $(ls /logs/artifacts | wc -l) = 1 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    engine = FailFirstVerifier()
    job = run_job(engine, load_tasks(tmp_path / "ds"), default_manifest("oracle"),
                  JobOptions(job_name="retry", jobs_dir=tmp_path / "jobs", backoff_multiplier=0.05))
    assert engine.failed  # positive control: the first verifier's creation really failed
    folder = next((tmp_path / "jobs/retry/trials").iterdir())
    result = TrialResult.model_validate_json((folder / "result.json").read_text())
    assert len(result.retries) == 1 and "injected" in result.retries[0]
    assert result.reward == {"reward": 1.0} and job.mean_reward == 1.0
    earlier = folder / "tries/1"
    assert len(list((earlier / "artifacts").iterdir())) == 1
    assert len(list((folder / "artifacts").iterdir())) == 1
    assert list((earlier / "artifacts").iterdir())[0].name != list((folder / "artifacts").iterdir())[0].name
    assert (earlier / "agent/trajectory.jsonl").read_text() != (folder / "agent/trajectory.jsonl").read_text()


def test_ctrl_c_while_the_verifier_runs_is_cancelled_and_resume_reruns_it(runtime, tmp_path):
    make_task(tmp_path / "ds", "slow-grade", toml=SMALL, solve="touch /app/ok\n",
              test="sleep 6\n" + REWARD_OK)
    job_dir = tmp_path / "jobs/cancel"
    events = job_dir / "events.jsonl"
    proc = subprocess.Popen([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle",
                             "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "cancel", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: events.is_file() and '"phase": "verify"' in events.read_text(), 120)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    assert "0 of 1 trial(s) finished, 1 cancelled" in proc.stderr.read()  # said at Ctrl-C
    result = json.loads(next((job_dir / "trials").glob("*/result.json")).read_text())
    assert result["failure_mode"] == "cancelled"
    hash_before = json.loads((job_dir / "config.json").read_text())["condition_hash"]
    resumed = subprocess.run([ORCHESTRA, "run", "--resume", str(job_dir), "-q"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "re-running 1" in resumed.stderr
    job = json.loads((job_dir / "result.json").read_text())
    assert job["counts"] == {"none": 1} and job["mean_reward"] == 1.0
    assert job["condition_hash"] == hash_before
    again = subprocess.run([ORCHESTRA, "run", "--resume", str(job_dir), "-q"], capture_output=True, text=True)
    assert again.returncode == 0 and "nothing left to run" in again.stderr


class NoStart(DockerRuntime):
    def start(self, container: str) -> None:
        raise APIError("500 Server Error: injected: engine broken")


def test_resume_with_retry_errors_reruns_infrastructure_failures(runtime, tmp_path):
    make_task(tmp_path / "ds", "t", toml=SMALL, solve="touch /app/ok\n")
    options = JobOptions(job_name="errs", jobs_dir=tmp_path / "jobs", max_retries=0)
    job = run_job(NoStart(), load_tasks(tmp_path / "ds"), default_manifest("oracle"), options)
    assert job.counts == {"launch_error": 1}
    options.resume = True
    job = run_job(runtime, load_tasks(tmp_path / "ds"), default_manifest("oracle"), options)
    assert job.counts == {"launch_error": 1}  # a plain resume keeps the error
    options.retry_errors = True
    job = run_job(runtime, load_tasks(tmp_path / "ds"), default_manifest("oracle"), options)
    assert job.counts == {"none": 1} and job.mean_reward == 1.0


class CuttingEngineProxy:
    """A unix socket in front of the real engine's that cuts the first `cuts` build
    requests mid-answer: a real transport failure during a real build."""

    def __init__(self, path: Path, cuts: int = 1):
        self.path, self.cuts, self.cut = path, cuts, 0
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(path))
        self.listener.listen(32)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX)
            engine.connect("/var/run/docker.sock")
            state = {"cut": False}
            threading.Thread(target=self._pump, args=(client, engine, state, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(engine, client, state, False), daemon=True).start()

    def _pump(self, src, dst, state, upstream):
        try:
            while data := src.recv(65536):
                if upstream and b"/build?" in data[:200] and self.cut < self.cuts:
                    self.cut += 1
                    state["cut"] = True
                dst.sendall(data)
                if not upstream and state["cut"]:  # the engine began answering: cut here
                    break
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        close_listener(self.listener)


@pytest.mark.parametrize("ahead", [0, None], ids=["in-trial", "build-pool"])
def test_a_transport_failure_mid_build_is_infra_and_retried_and_a_bad_dockerfile_is_not(tmp_path, ahead):
    """Build: an engine/transport error during a build is infrastructure (retried, the trial
    then graded); a Dockerfile that fails is build_error (not retried). In the trial's own
    build phase (--build-ahead 0) the cut is the trial's retry; in the job's build pool (the
    default) it is the pool's record, and the trial builds the image itself, graded, no
    retry spent; the bad Dockerfile is built once either way."""
    marker = uuid.uuid4().hex
    make_task(tmp_path / "ds", "cut-build", solve="touch /app/ok\n",
              dockerfile=f"FROM python:3.12-slim-bookworm\nWORKDIR /app\nRUN echo {marker} > /marker\n")
    make_task(tmp_path / "ds", "bad-dockerfile", solve="touch /app/ok\n",
              dockerfile="FROM python:3.12-slim-bookworm\nRUN exit 9\n")
    proxy = CuttingEngineProxy(tmp_path / "docker.sock", cuts=1)
    try:
        engine = DockerRuntime(EngineClient(base_url=f"unix://{tmp_path}/docker.sock", timeout=120))
        options = JobOptions(job_name="cut-build", jobs_dir=tmp_path / "jobs", n_concurrent=1,
                             backoff_multiplier=0.1, build_workers=ahead)
        tasks = sorted(load_tasks(tmp_path / "ds"), key=lambda t: t.name.endswith("bad-dockerfile"))
        job = run_job(engine, tasks, default_manifest("oracle"), options)
    finally:
        proxy.close()
    results = trials_by_task(tmp_path / "jobs/cut-build")
    cut, bad = results["cut-build"][0], results["bad-dockerfile"][0]
    assert proxy.cut == 1, (cut, bad)
    assert cut.reward == {"reward": 1.0} and cut.failure_mode == "none"
    if ahead == 0:
        assert job.builds == []
        assert len(cut.retries) == 1 and "infra_error" in cut.retries[0], cut.retries
        assert "the engine failed during the build" in cut.retries[0]
    else:
        assert sorted(b.task for b in job.builds) == ["ds/bad-dockerfile", "ds/cut-build"], job.builds
        # two builders race for the one cut: whichever build it hit records the engine's failure
        cut_in_pool = [b for b in job.builds if "the engine failed during the build" in (b.error or "")]
        assert len(cut_in_pool) == 1, job.builds
        assert cut.retries == [], cut.retries  # the pool's engine failure cost the trial nothing
    assert bad.failure_mode == "build_error" and bad.retries == [] and "exit" in bad.error.lower()


FORGE_TOOLS = """
python3 - <<'PY'
import os, sys
# the forger's interpreter where this image has it (a stand-in base keeps python3 in /usr/local/bin)
forger = ("#!" + sys.executable + "\\nimport os\\nos.makedirs('/logs/verifier', exist_ok=True)\\n"
          "open('/logs/verifier/reward.txt', 'w').write('1')\\n")
for tool in ("bash", "dash", "sh", "timeout", "rm", "mv", "mkdir"):
    tmp = f"/usr/bin/.{tool}.new"
    open(tmp, "w").write(forger)
    os.chmod(tmp, 0o755)
    os.replace(tmp, f"/usr/bin/{tool}")  # a rename: the running bash keeps its own file
PY
"""


@pytest.mark.parametrize("mode", ["shared", "snapshot"])
def test_a_forged_bash_and_sh_cannot_grade_a_shared_or_snapshot_trial(runtime, tmp_path, monkeypatch, mode):
    """The agent replaces bash, sh, timeout, rm, mv and mkdir with a forger writing reward 1
    and does not do the task. The verifier's wrapper and test.sh run under the host's static
    bash and busybox, mounted read-only: reward 0. Without them (the old way) the forger wins."""
    make_task(tmp_path / "ds", "forge", solve=FORGE_TOOLS, test=REWARD_OK.split("; ", 1)[1],
              toml=f'[verifier]\nenvironment_mode = "{mode}"\n[environment]\ncpus = 0.5\n')
    from orchestrator.trial import verifier_tools
    assert verifier_tools.host_tools(), "make test installs bash-static and busybox-static"
    rewards = {}
    for label, tools in (("static", verifier_tools.host_tools()), ("image", {})):
        monkeypatch.setattr(verifier_tools, "host_tools", lambda tools=tools: tools)
        options = JobOptions(job_name=f"forge-{mode}-{label}", jobs_dir=tmp_path / "jobs")
        run_job(runtime, load_tasks(tmp_path / "ds"), default_manifest("oracle"), options)
        (folder,) = (tmp_path / "jobs" / options.job_name / "trials").iterdir()
        rewards[label] = TrialResult.model_validate_json((folder / "result.json").read_text())
    static, image = rewards["static"], rewards["image"]
    # positive control: without the host's tools the forger graded itself (the case is real)
    assert image.reward == {"reward": 1.0} and image.verifier_interpreter.startswith("the image's own")
    assert static.reward == {"reward": 0.0}, static.error
    assert static.verifier_interpreter.startswith("static bash + busybox") and static.verifier_forgeable


def test_a_leaked_answer_is_void_and_fails_every_gate(runtime, tmp_path):
    make_leaky_task(tmp_path / "ds", "leaky")
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle",
                           "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "void"],
                          capture_output=True, text=True)
    # positive control: the agent read the seed source shipped in the image and logged it
    trial_dir = next((tmp_path / "jobs/void/trials").iterdir())
    assert "correct horse battery staple" in (trial_dir / "agent/trajectory.jsonl").read_text()
    assert proc.returncode == 4, proc.stderr
    job = json.loads((tmp_path / "jobs/void/result.json").read_text())
    assert job["mean_reward"] == 0.0 and len(job["void"]) == 1 and job["trials"][0]["reward"] is None
    trial = json.loads(next((tmp_path / "jobs/void/trials").glob("*/result.json")).read_text())
    assert trial["voided_reward"] == {"reward": 1.0} and trial["reward"] is None
    gate = subprocess.run([ORCHESTRA, "report", str(tmp_path / "jobs/void"), "--fail-under", "1.0",
                           "--junit", str(tmp_path / "junit.xml")], capture_output=True, text=True)
    assert gate.returncode == 1
    junit = (tmp_path / "junit.xml").read_text()
    assert 'failures="1"' in junit and "void" in junit
    assert "void (answer leak, counted as failed): 1" in (tmp_path / "jobs/void/report.md").read_text()


def test_job_names_are_one_safe_segment_and_outputs_never_replace_devices(runtime, tmp_path):
    make_task(tmp_path / "ds", "t", toml=SMALL, solve="touch /app/ok\n")
    for bad in ("../escape", "a/b", ".."):
        proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--jobs-dir",
                               str(tmp_path / "jobs"), "--job-name", bad], capture_output=True, text=True)
        assert proc.returncode == 2 and "--job-name" in proc.stderr, (bad, proc.stderr)
    assert not (tmp_path / "escape").exists()
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--jobs-dir",
                           str(tmp_path / "jobs"), "--job-name", "out", "-q", "--json", "/dev/stdout"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert '"mean_reward": 1.0' in proc.stdout
    assert os.path.islink("/dev/stdout")  # still the link it was, not a file put in its place
    proc = subprocess.run([ORCHESTRA, "compare", str(tmp_path / "jobs/out"), str(tmp_path / "jobs/out"),
                           "--json", "-"], capture_output=True, text=True)
    assert proc.returncode == 2 and "nothing differs" in proc.stderr  # a job against itself
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--jobs-dir",
                           str(tmp_path / "jobs"), "--job-name", "off", "-q", "--policy", "memory-off"],
                          capture_output=True, text=True)
    proc = subprocess.run([ORCHESTRA, "compare", str(tmp_path / "jobs/out"), str(tmp_path / "jobs/off"),
                           "--json", "-"], capture_output=True, text=True)
    assert proc.returncode == 0 and '"paired": 1' in proc.stdout
