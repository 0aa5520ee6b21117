"""Hostile agents, round 2 (issue 26): agent-made data never becomes an infrastructure
error; one trial's own disk filling up is that trial's disk_limit, never the job's; a
trial reaches nothing on the host but its own services, through the firewall or the egress
proxy; processes an agent leaves running cannot block or fail the grading; one trial's
model-call flood leaves another's latency alone. One job, with retries on (a case that came
out as infra would show as retried), beside a bystander; each case a task whose
solution/solve.sh or tests/test.sh is the behaviour."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import make_task, nothing_left, wait_for
from kit import OCI_RUNTIME, model_endpoint, rss_mb, trials_by_task

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import Manifest, default_manifest
from orchestrator.services import exchanges
from orchestrator.tasks.load import load_tasks

SMALL = "[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 256\n"
# The FIFO case's staged files (its scripts say 8000 too). The host stages them in ~0.3 s
# (3000 took ~0.18 s, and once, in a two-worker clean-clone run, the planter saw the folder
# only after the host had written every name: nothing planted, its control failed).
FIFO_FILES = 8000
REWARD_OK = "mkdir -p /logs/verifier; if [ -e /app/ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"

CASES = {
    # a number that does not fit a float (OverflowError), and one past Python's 4,300-digit
    # int-string limit (ValueError): both used to be retried twice as infra_error
    "reward-401-digits": dict(test="mkdir -p /logs/verifier; printf '{\"reward\": 1%0400d}' 0 > /logs/verifier/reward.json\n"),
    "reward-5001-digits": dict(test="mkdir -p /logs/verifier; printf '{\"reward\": 1%05000d}' 0 > /logs/verifier/reward.json\n"),
    # 1,000 nested folders in /logs/artifacts: RecursionError in the host-side walk; the
    # depth reached is written at every level (the positive control)
    "deep-artifacts": dict(solve="cd /logs/artifacts && echo fine > normal.txt\n"
                                 "for i in $(seq 1000); do mkdir d && cd d && echo $i > /logs/agent/depth.txt; done\n"
                                 "echo deep > file\ntouch /app/ok\n"),
    # every inode of the trial's own 64 MB disk used up: the host's staging write gets
    # ENOSPC. The agent records how many it made, what stopped it and what was left free.
    "inodes": dict(toml="[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 64\n",
                   solve="touch /app/ok\ncd /logs/artifacts && python3 -c \"\nimport errno, json, os\ni = 0\n"
                         "while True:\n    try:\n        open(f'i{i}', 'w').close()\n    except OSError as exc:\n"
                         "        why = errno.errorcode.get(exc.errno, str(exc.errno))\n        break\n"
                         "    i += 1\ns = os.statvfs('.')\n"
                         "print(json.dumps({'made': i, 'stopped_by': why, 'free_inodes': s.f_ffree}))\""
                         " > /logs/agent/inodes.json\n"),
    # a process left running plants FIFOs wherever the host stages the tests: opening one
    # for writing used to block the grading thread until a reader came (none does). The
    # tests are test.sh and FIFO_FILES small files, so the host's staging takes long enough
    # for the planter (one pass over every name, as soon as it sees the folder) to win the
    # race for some names: it records which (/tmp/planted.json, which test.sh copies into
    # /logs/verifier, collected after grading); test.sh records whether every staged file
    # arrived as a regular file with its content.
    "fifo-staging": dict(toml="[environment]\ncpus = 1\nmemory_mb = 256\nstorage_mb = 256\n"
                              "[verifier]\ntimeout_sec = 20\n",
                         files={f"tests/f{i:04d}": f"f{i:04d}\n" for i in range(FIFO_FILES)},
                         solve=r"""touch /app/ok
setsid nohup python3 -c "
import glob, json, os, time
names = ['test.sh'] + ['f%04d' % i for i in range(8000)]
end = time.time() + 300
open('/tmp/planter-ready', 'w').close()
while time.time() < end:
    found = glob.glob('/logs/.orchestra-tests-*')
    if found:
        planted = []
        for name in names:
            try:
                os.mkfifo(found[0] + '/' + name)
                planted.append(name)
            except OSError:
                pass
        json.dump({'folder': found[0], 'planted': planted}, open('/tmp/.planted', 'w'))
        os.rename('/tmp/.planted', '/tmp/planted.json')
        break
" >/dev/null 2>&1 &
# the agent phase ends only once the planter polls: under load its Python started after
# the host had staged every file (a clean-clone run: nothing planted, no race run)
for i in $(seq 300); do [ -e /tmp/planter-ready ] && break; sleep 0.1; done
""",
                         test=r"""mkdir -p /logs/verifier
for i in $(seq 100); do [ -e /tmp/planted.json ] && break; sleep 0.1; done
cp /tmp/planted.json /logs/verifier/planted.json 2>/dev/null
python3 - <<'PY'
import json, os, stat
names = ['test.sh'] + ['f%04d' % i for i in range(8000)]
odd = [n for n in names if not stat.S_ISREG(os.lstat('/tests/' + n).st_mode)]
wrong = [n for n in names[1:] if n not in odd and open('/tests/' + n).read() != n + '\n']
json.dump({'not_regular': odd, 'wrong_content': wrong}, open('/logs/verifier/staged.json', 'w'))
open('/logs/verifier/reward.txt', 'w').write('0' if odd or wrong else '1')
PY
"""),
    # a process left running churns /logs/verifier while the host empties it; test.sh
    # waits (up to 5 s) until it sees the churn in the fresh /logs/verifier and says so
    "verifier-churn": dict(solve="""touch /app/ok
setsid nohup sh -c 'i=0; while true; do mkdir -p /logs/verifier/d$i && touch /logs/verifier/d$i/f /logs/verifier/x$i; i=$((i+1)); done' >/dev/null 2>&1 &
sleep 1
""", test="""mkdir -p /logs/verifier
seen=no
for i in $(seq 50); do if ls /logs/verifier | grep -q '^x'; then seen=yes; break; fi; sleep 0.1; done
echo $seen > /logs/verifier/churn-seen.txt
if [ -e /app/ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""),
    "bystander": dict(solve="touch /app/ok\n"),
}

# A no-network trial probes a host service bound to all addresses at its own gateway (where
# its relay listens): the firewall lets through only the relay's port.
HOST_PORT = """touch /app/ok
python3 - <<'PY'
import os, socket, subprocess, urllib.parse
gateway = urllib.parse.urlsplit(os.environ["ORCHESTRA_RELAY_URL"]).hostname
s = socket.socket(); s.settimeout(3)
open("/logs/agent/target.txt", "w").write(f"{gateway}:PORT")  # the positive control: tried it
try:
    s.connect((gateway, PORT)); seen = "open"
except OSError as exc:
    seen = "blocked"
relay = subprocess.run(["chan", "whoami"], capture_output=True).returncode
open("/logs/artifacts/probe.txt", "w").write(f"{seen} relay={relay}")
PY
"""

# An allowlisted trial asks its egress proxy for the host itself (the allowlist covers
# every address), sends a 768 MiB body, a forged Host, and streams 128 MiB.
EGRESS = r"""touch /app/ok
python3 - <<'PY'
import json, os, socket, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["http_proxy"])
gateway, port = proxy.hostname, proxy.port
CRLF = "\r\n"

def ask(*lines):
    s = socket.create_connection((gateway, port), timeout=30)
    s.sendall((CRLF.join(lines) + CRLF + CRLF).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    try:
        data += s.recv(600)
    except OSError:
        pass
    s.close()
    first, _, rest = data.partition(b"\r\n")
    return first.decode(errors="replace") + " | " + rest.decode(errors="replace")[-300:]

out = {}
out["gateway"] = ask(f"GET http://{gateway}:PORT/ HTTP/1.1", f"Host: {gateway}")
out["loopback"] = ask("CONNECT 127.0.0.1:PORT HTTP/1.1", "Host: x")
out["host_address"] = ask("GET http://HOST_IP:PORT/ HTTP/1.1", "Host: x")
out["metadata"] = ask("CONNECT 169.254.169.254:80 HTTP/1.1", "Host: x")
out["huge"] = ask("POST http://deb.debian.org/ HTTP/1.1", "Host: deb.debian.org", "Content-Length: 805306368")
out["forged_host"] = ask("GET http://deb.debian.org/debian/dists/bookworm/Release HTTP/1.1", "Host: evil.example")
s = socket.create_connection((gateway, port), timeout=30)
total, sent = 128 * 1024 * 1024, 0
s.sendall(CRLF.join(["POST http://deb.debian.org/debian/ HTTP/1.1", "Host: deb.debian.org",
                     f"Content-Length: {total}", "", ""]).encode())
block = b"x" * 65536
try:
    while sent < total:
        s.sendall(block); sent += len(block)
except OSError:
    pass
out["streamed_sent"] = sent
json.dump(out, open("/logs/artifacts/egress.json", "w"), indent=1)
PY
"""


@pytest.fixture(scope="module", autouse=True)
def _nothing_left_after_this_module(runtime):
    yield
    assert nothing_left(runtime) == {}


def _host_ip() -> str:
    """The host's own address on its main interface."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is chosen
    try:
        return probe.getsockname()[0]
    finally:
        probe.close()


FIGURES: dict = {}
ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


@pytest.fixture(scope="module")
def round2(runtime, tmp_path_factory):
    root = tmp_path_factory.mktemp("round2")
    listener = socket.socket()  # a host service on every address (as sshd or a database is)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 0))
    listener.listen(16)
    port = str(listener.getsockname()[1])
    cases = {**CASES,
             "host-port": dict(toml='[relay]\nenabled = true\n' + SMALL + 'network_mode = "none"\n',
                               solve=HOST_PORT.replace("PORT", port), port=port),
             "egress": dict(toml=SMALL + 'network_mode = "allowlist"\nallowed_hosts = ["0.0.0.0/0", "deb.debian.org"]\n',
                            solve=EGRESS.replace("PORT", port).replace("HOST_IP", _host_ip()))}
    for name, case in cases.items():
        make_task(root / "ds", name, toml=case.get("toml", SMALL), solve=case.get("solve", "touch /app/ok\n"),
                  test=case.get("test", REWARD_OK), files=case.get("files"))
    samples = {"rss": rss_mb()}
    baseline = dict(samples)
    stop = threading.Event()

    def sample():
        while not stop.wait(0.05):
            samples["rss"] = max(samples["rss"], rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        job = run_job(runtime, load_tasks(root / "ds"), default_manifest("oracle"),
                      JobOptions(job_name="round2", jobs_dir=root / "jobs", n_concurrent=3, max_retries=2,
                                 oci_runtime=OCI_RUNTIME))
    finally:
        stop.set()
        sampler.join()
        listener.close()
    FIGURES["orchestrator_rss_growth_mb"] = round(samples["rss"] - baseline["rss"], 1)
    yield job, trials_by_task(root / "jobs/round2"), cases
    print("\nround2 figures: " + json.dumps(FIGURES, sort_keys=True))


def test_the_job_finished_every_trial_once_and_the_bystander_is_unaffected(round2):
    job, t, cases = round2
    assert sorted(t) == sorted(cases) and job.n_trials == len(cases)
    assert {name: r.retries for name, (r, _) in t.items() if r.retries} == {}
    assert t["bystander"][0].reward == {"reward": 1.0}


@pytest.mark.parametrize("name, digits, why", [
    ("reward-401-digits", 401, "reward.json: key 'reward': a number too large for a float"),  # OverflowError
    ("reward-5001-digits", 5001, "reward.json: not JSON"),  # past the 4,300-digit int-string limit
])
def test_a_reward_no_float_holds_is_a_verifier_error_naming_why(round2, name, digits, why):
    _, t, _ = round2
    result, folder = t[name]
    # positive control: test.sh really wrote the number, all its digits (collected after grading)
    written = (folder / "verifier/reward.json").read_text()
    assert written == '{"reward": 1' + "0" * (digits - 1) + "}", written[:80]
    assert result.failure_mode == "verifier_error" and result.retries == [], (result.failure_mode, result.error)
    assert why in result.error, result.error


def test_a_thousand_level_artifact_tree_is_collected_as_far_as_it_goes(round2):
    _, t, _ = round2
    result, folder = t["deep-artifacts"]
    depth = int((folder / "agent/depth.txt").read_text())  # positive control: how deep it went
    if OCI_RUNTIME == "runsc":  # 1,000 nested folders through gVisor's gofer outlast the 600 s
        assert depth >= 1 and result.failure_mode == "agent_timeout", (depth, result.failure_mode, result.error)
        return  # (tests/hostile/README.md, under gVisor); the collection below is runc's
    assert depth == 1000  # every level made
    assert result.failure_mode == "none" and result.reward == {"reward": 1.0}, result.error
    assert (folder / "artifacts/normal.txt").read_text() == "fine\n"
    collected = result.collected["/logs/artifacts"]
    assert collected.skipped >= 1 and collected.truncated is True, collected  # the deep part, counted


def test_an_agent_that_uses_up_its_own_disk_gets_disk_limit_and_the_job_goes_on(round2):
    _, t, _ = round2
    result, folder = t["inodes"]
    # positive control: the agent's own record; its files stopped at ENOSPC with no inode left
    filled = json.loads((folder / "agent/inodes.json").read_text())
    FIGURES.update(inodes=filled, inodes_mode=result.failure_mode.value)
    assert filled["stopped_by"] == "ENOSPC" and filled["free_inodes"] == 0 and filled["made"] > 1000, filled
    # the host's staging of the tests then finds no inode either: that trial's disk_limit,
    # not retried, and the job goes on (the bystander: test_the_job_finished_every_trial_once...)
    assert result.failure_mode == "disk_limit" and result.retries == [], (result.failure_mode, result.error)
    assert "own disk is full (storage_mb=64)" in result.error, result.error


def test_a_no_network_trial_reaches_its_relay_and_no_other_port_of_its_gateway(round2):
    _, t, cases = round2
    result, folder = t["host-port"]
    port = cases["host-port"]["port"]
    # positive control: the probe tried the listener's port on its gateway (and its network
    # is up: its relay answered)
    assert (folder / "agent/target.txt").read_text().endswith(f":{port}")
    assert (folder / "artifacts/probe.txt").read_text().endswith(" relay=0")
    assert (folder / "artifacts/probe.txt").read_text() == "blocked relay=0"
    assert result.limits.host_isolation == "iptables" and result.reward == {"reward": 1.0}
    assert result.limits.host_ports is not None and len(result.limits.host_ports) == 1  # the relay's


def test_the_egress_proxy_never_connects_to_the_host_and_streams_what_it_forwards(round2):
    _, t, _ = round2
    result, folder = t["egress"]
    seen = json.loads((folder / "artifacts/egress.json").read_text())
    FIGURES["egress"] = {k: v.split(" | ")[0] if isinstance(v, str) else v for k, v in seen.items()}
    # positive control: every request was sent and answered, and the whole 128 MiB body
    # went into the proxy (twice the RSS bound below: holding it whole would show)
    assert sorted(seen) == ["forged_host", "gateway", "host_address", "huge", "loopback", "metadata",
                            "streamed_sent"], seen
    assert all(seen[k].startswith("HTTP/1.1 ") for k in seen if k != "streamed_sent"), seen
    assert seen["streamed_sent"] == 128 * 1024 * 1024, seen["streamed_sent"]
    for key, why in (("gateway", "orchestra's trial networks"), ("loopback", "loopback"),
                     ("host_address", "an address of this host"), ("metadata", "link-local")):
        assert seen[key].startswith("HTTP/1.1 403") and why in seen[key], (key, seen[key])
    assert seen["huge"].startswith("HTTP/1.1 413"), seen["huge"]  # refused before a byte is read
    # the destination got its own name as Host: Debian's mirror answers a forged one 404
    assert seen["forged_host"].startswith("HTTP/1.1 200"), seen["forged_host"]
    assert result.limits.host_ports is not None and len(result.limits.host_ports) == 1  # the proxy's
    # 128 MiB went (or began to go) through the proxy: streamed, never held whole
    assert FIGURES["orchestrator_rss_growth_mb"] < 64, FIGURES
    assert result.reward == {"reward": 1.0}


def test_a_fifo_planted_where_the_tests_are_staged_never_blocks_the_grading(round2):
    """The host's writes never block and never go into what the agent planted: every name
    the planter won is unlinked unopened and written afresh, so test.sh finds every staged
    file a regular file with its content and grades 1.0."""
    _, t, _ = round2
    result, folder = t["fifo-staging"]
    # positive control: the planter saw the staging folder and won the race for some names
    # (FIFOs made before the host wrote those files); it makes one pass, so it never races
    # the host's unlink-then-create of the same name twice
    planted = json.loads((folder / "verifier/planted.json").read_text())
    FIGURES["fifo_planted"] = len(planted["planted"])
    FIGURES["fifo_planted_test_sh"] = "test.sh" in planted["planted"]
    assert planted["folder"].startswith("/logs/.orchestra-tests-") and planted["planted"], planted
    staged = json.loads((folder / "verifier/staged.json").read_text())
    assert staged == {"not_regular": [], "wrong_content": []}, staged
    assert result.failure_mode == "none" and result.reward == {"reward": 1.0} and result.retries == [], result.error
    # Hang guard only: grading (3,001 files staged and checked) takes ~3 s; a host open
    # blocked on a FIFO never returns (the verifier's own 20 s timeout does not cover the
    # host's staging)
    assert result.timings.verify < 60
    FIGURES["fifo_verify_s"] = round(result.timings.verify, 2)


def test_a_process_churning_the_verifier_logs_is_the_agents_doing_not_infra(round2):
    _, t, _ = round2
    result, folder = t["verifier-churn"]
    # positive control: test.sh saw the churner at work in the fresh /logs/verifier
    assert (folder / "verifier/churn-seen.txt").read_text() == "yes\n"
    # the tests are moved in whatever the churner does (its churn once made `rm -rf
    # /logs/verifier` fail, and with it the move: "test.sh: No such file"), so test.sh runs
    assert result.failure_mode == "none" and result.reward == {"reward": 1.0} and result.retries == [], result.error


# ---- one trial's model-call flood beside another trial's model calls ---------------------
WINDOW_SEC = 5
MODEL_BYSTANDER = r"""touch /app/ok
python3 - <<'PY'
import json, os, time, urllib.request
base, token = os.environ["ORCHESTRA_MODEL_URL"], os.environ["ORCHESTRA_MODEL_TOKEN"]
body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
times, end = [], time.monotonic() + WINDOW
while time.monotonic() < end:
    req = urllib.request.Request(base + "/chat/completions", data=body, method="POST",
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    t = time.monotonic()
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
    times.append(time.monotonic() - t)
    time.sleep(0.05)
times.sort()
json.dump({"p95": times[int(0.95 * len(times)) - 1], "median": times[len(times) // 2], "n": len(times)},
          open("/logs/artifacts/latency.json", "w"))
PY
""".replace("WINDOW", str(WINDOW_SEC))

# sixteen keep-alive connections of small calls, as fast as the proxy answers
MODEL_FLOOD = r"""touch /app/ok
python3 - <<'PY'
import collections, http.client, json, os, threading, time, urllib.parse
base, token = os.environ["ORCHESTRA_MODEL_URL"], os.environ["ORCHESTRA_MODEL_TOKEN"]
url = urllib.parse.urlsplit(base)
body = json.dumps({"messages": [{"role": "user", "content": "x" * 4000}]}).encode()
statuses, end = collections.Counter(), time.monotonic() + WINDOW
started = time.monotonic()

def press():
    conn = None
    while time.monotonic() < end:
        try:
            conn = conn or http.client.HTTPConnection(url.hostname, url.port, timeout=30)
            conn.request("POST", url.path + "/chat/completions", body=body,
                         headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            statuses[str(response.status)] += 1
            if response.getheader("Connection", "").lower() == "close":
                conn.close(); conn = None
        except OSError:
            statuses["error"] += 1
            conn = None

workers = [threading.Thread(target=press) for _ in range(16)]
for w in workers:
    w.start()
for w in workers:
    w.join()
json.dump({"statuses": dict(statuses), "seconds": time.monotonic() - started}, open("/logs/artifacts/flood.json", "w"))
PY
""".replace("WINDOW", str(WINDOW_SEC))


@pytest.fixture(scope="module")
def model_load(runtime, tmp_path_factory):
    """The bystander alone (quiet), then beside the flood (loud); exchanges.jsonl capped
    at 128 KiB for the loud job so that the cap is reached."""
    root = tmp_path_factory.mktemp("model-load")
    make_task(root / "ds", "bystander-model", toml=SMALL, solve=MODEL_BYSTANDER)
    make_task(root / "ds", "model-flood", toml=SMALL, solve=MODEL_FLOOD)
    tasks = sorted(load_tasks(root / "ds"), key=lambda t: t.short_name)
    manifest = Manifest.model_validate({"condition": "model-load", "roster": [
        {"id": "lead", "kind": "orchestrator", "agent": "oracle", "endpoint": "upstream"}]})
    with model_endpoint() as endpoints:
        run_job(runtime, tasks[:1], manifest, JobOptions(job_name="model-quiet", jobs_dir=root / "jobs",
                                                         n_concurrent=2, endpoints=endpoints))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(exchanges, "MAX_TOTAL", 128 * 1024)
            run_job(runtime, tasks, manifest, JobOptions(job_name="model-loud", jobs_dir=root / "jobs",
                                                         n_concurrent=2, endpoints=endpoints))
    return trials_by_task(root / "jobs/model-quiet"), trials_by_task(root / "jobs/model-loud")


def test_a_model_call_flood_is_held_to_the_request_rate_and_leaves_a_bystander_alone(model_load):
    quiet, loud = model_load
    calm, busy = (json.loads((trials["bystander-model"][1] / "artifacts/latency.json").read_text())
                  for trials in (quiet, loud))
    flood, folder = loud["model-flood"]
    sent = json.loads((folder / "artifacts/flood.json").read_text())
    statuses = sent["statuses"]
    FIGURES.update(model_bystander_p95_quiet_s=round(calm["p95"], 4), model_bystander_p95_flood_s=round(busy["p95"], 4),
                   model_flood_statuses=statuses, model_flood_calls=flood.model.calls)
    assert calm["n"] >= 50 and busy["n"] >= 50
    # positive control: the flood pressed for its whole window and sent more calls than the
    # burst and a second of the rate (50 + 25): the rate had to hold some of them
    assert sent["seconds"] >= WINDOW_SEC and sum(statuses.values()) > 50 + 25, sent
    # 25 calls a second after a burst of 50, for the window (and the ramp around it): the
    # flood was made to wait, and no more got through
    assert flood.model.request_rate_waited_sec > 1, flood.model
    assert flood.model.calls <= 25 * (WINDOW_SEC + 4) + 50, flood.model
    # The call count above is what fails without the request rate (2,594 calls). Hang guard
    # only: the bystander's calls still answer (p95 ~10 ms quiet; 2 s is 200 times that).
    # How close it stays to quiet is bench's bystander_model_p95_ratio (target <= 2x).
    assert busy["p95"] < 2.0, (busy, calm)
    assert all(t[0].reward == {"reward": 1.0} for t in loud.values())


def test_exchanges_past_the_cap_are_counted_not_written(model_load):
    _, loud = model_load
    flood, folder = loud["model-flood"]
    # positive control: the flood's answered calls (4 KB each) were more than the 128 KiB cap holds
    answered = json.loads((folder / "artifacts/flood.json").read_text())["statuses"].get("200", 0)
    assert answered * 4000 > 128 * 1024, answered
    written = (folder / "model/exchanges.jsonl").stat().st_size
    assert written <= 128 * 1024 and flood.model.exchanges_dropped > 0, flood.model
    assert flood.model.exchanges_written + flood.model.exchanges_dropped == flood.model.calls
    assert len((folder / "model/exchanges.jsonl").read_text().splitlines()) == flood.model.exchanges_written
    FIGURES.update(exchanges_written=flood.model.exchanges_written, exchanges_dropped=flood.model.exchanges_dropped)


def test_the_tests_shipped_in_the_image_and_read_there_void_the_trial(runtime, tmp_path):
    """`COPY . /app` shipped the task's own test.sh: the agent reads it at /app/test.sh (no
    seed source path anywhere) and passes. The audit knows the file by content: answer leak,
    exit 4; the doctor names the same image leaky (tests/integration/test_wild.py)."""
    task = make_task(tmp_path / "ds", "copied-tests", toml=SMALL,
                     dockerfile="FROM python:3.12-slim-bookworm\nWORKDIR /app\nCOPY . /app\n",
                     test=REWARD_OK + "# the expected answer is 6c3f0e1a9b, compared byte for byte below\n",
                     solve='out=$(cat /app/test.sh)\ntraj tool shell "cat /app/test.sh" --output "$out"\ntouch /app/ok\n')
    (task / "environment/test.sh").write_text((task / "tests/test.sh").read_text())
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle",
                           "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "copied", "-q"],
                          capture_output=True, text=True, timeout=600)
    trial_dir = next((tmp_path / "jobs/copied/trials").iterdir())
    # positive control: the agent really read the shipped test.sh and logged what it read
    assert "6c3f0e1a9b" in (trial_dir / "agent/trajectory.jsonl").read_text()
    assert proc.returncode == 4, proc.stderr[-2000:]
    trial = json.loads((trial_dir / "result.json").read_text())
    assert trial["reward"] is None and trial["voided_reward"] == {"reward": 1.0}
    assert any("tests/test.sh" in leak for leak in trial["memory"]["leaks"]), trial["memory"]["leaks"]


def test_two_jobs_of_one_name_in_two_folders_leave_each_other_alone(runtime, tmp_path):
    """Job A (a 20 s trial) runs; job B, the same --job-name in another --jobs-dir, starts
    and ends meanwhile. B's clean-up used to remove A's live containers (clean-up by job
    name); now each process removes only what it made."""
    make_task(tmp_path / "slow", "slow", toml=SMALL, solve="sleep 20\ntouch /app/ok\n")
    make_task(tmp_path / "quick", "quick", toml=SMALL, solve="touch /app/ok\n")
    first = subprocess.Popen([ORCHESTRA, "run", "--path", str(tmp_path / "slow"), "--agent", "oracle", "-q",
                              "--jobs-dir", str(tmp_path / "a"), "--job-name", "twin-name"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: runtime.labelled("orchestra.job=twin-name")[0], timeout=120)
        second = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "quick"), "--agent", "oracle", "-q",
                                 "--jobs-dir", str(tmp_path / "b"), "--job-name", "twin-name"],
                                capture_output=True, text=True, timeout=300)
        # positive control: B ran to its end (its own clean-up included) while A still ran
        assert second.returncode == 0 and first.poll() is None, second.stderr[-2000:]
        assert json.loads((tmp_path / "b/twin-name/result.json").read_text())["mean_reward"] == 1.0
        assert runtime.labelled("orchestra.job=twin-name")[0], "B's end removed A's containers"
        assert first.wait(timeout=300) == 0, first.stderr.read()[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
    result = json.loads((tmp_path / "a/twin-name/result.json").read_text())
    assert result["mean_reward"] == 1.0 and result["counts"] == {"none": 1}, result["counts"]


def test_a_read_only_jobs_dir_is_exit_2_naming_it(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], check=True)
    try:
        with pytest.raises(OSError, match="Read-only file system"):  # positive control: it is
            (folder / "probe").write_text("x")
        make_task(tmp_path / "ds", "t", toml=SMALL, solve="touch /app/ok\n")
        proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-q",
                               "--jobs-dir", str(folder)], capture_output=True, text=True, timeout=120,
                              env={**os.environ})
    finally:
        subprocess.run(["umount", str(folder)], check=True)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and f"--jobs-dir: {folder}" in proc.stderr, proc.stderr
    assert "Read-only file system" in proc.stderr
