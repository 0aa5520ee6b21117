"""Harbor's semantics on the real engine, with tasks of our own in Harbor's form: the live
shared verifier, per-phase network policy, prebuilt images that fall back to a build."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from conftest import HOST_CA, by_task, make_task, needs_container_network, run

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.tasks.load import load_tasks

SERVICE = """
    mkdir -p /srv/www && echo served > /srv/www/index.html
    cd /srv/www && nohup python3 -m http.server 8000 >/dev/null 2>&1 &
    sleep 1
"""
GRADE_SERVICE = """
    mkdir -p /logs/verifier
    python3 - <<'PY'
    import urllib.request
    try:
        ok = urllib.request.urlopen("http://127.0.0.1:8000/index.html", timeout=5).read() == b"served\\n"
    except OSError:
        ok = False
    open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
    PY
"""
APT = """
    mkdir -p /logs/verifier
    apt="-o Acquire::http::Timeout=10 -o Acquire::Retries=0"
    # without a network `apt-get update` only warns (the image keeps debootstrap's lists),
    # so the install is what must fail; DNS without a network hangs, hence the timeout
    if timeout 90 sh -c "apt-get $apt update -qq && apt-get $apt install -y -qq hello" >/logs/verifier/apt.txt 2>&1 \\
        && /usr/bin/hello | grep -q 'Hello, world'; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""

FETCH = """
    mkdir -p /logs/verifier
    python3 - <<'PY'
    import urllib.request
    try:
        ok = b"Codename: bookworm" in urllib.request.urlopen(
            "http://deb.debian.org/debian/dists/bookworm/Release", timeout=30).read(4096)
    except OSError:
        ok = False
    open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
    PY
"""


def test_a_service_started_by_the_agent_is_graded_live_in_shared_mode(runtime, tmp_path):
    make_task(tmp_path / "ds", "live", solve=SERVICE, test=GRADE_SERVICE)
    make_task(tmp_path / "ds", "snap", solve=SERVICE, test=GRADE_SERVICE,
              toml='[verifier]\nenvironment_mode = "snapshot"\n')
    _, trials = run(runtime, tmp_path / "ds", tmp_path / "jobs", name="live")
    t = by_task(trials)
    assert t["live"].verifier_mode == "shared" and t["live"].reward == {"reward": 1.0}
    assert t["live"].verifier_forgeable is True
    # snapshot grades a commit of the stopped container: the files, no process
    assert t["snap"].verifier_mode == "snapshot" and t["snap"].reward == {"reward": 0.0}
    assert runtime.labelled("orchestra.job=live") == ([], [], [])


@pytest.mark.part("network-containers")
def test_the_verifier_network_policy_holds_at_grading_time(runtime, tmp_path, container_network):
    """A grading-time apt-get from Debian's mirror: where the containers reach no package
    index at all, public and no-network would look alike (both 0): the test skips, saying so."""
    needs_container_network(container_network)
    ds = tmp_path / "ds"
    make_task(ds, "apt-public", test=APT, toml="[verifier]\ntimeout_sec = 300\n")
    make_task(ds, "apt-none", test=APT,
              toml='[verifier]\ntimeout_sec = 300\nnetwork_mode = "no-network"\n')
    make_task(ds, "apt-agent-none", test=FETCH, toml=(
        '[agent]\nnetwork_mode = "no-network"\n[verifier]\ntimeout_sec = 300\n'))
    make_task(ds, "apt-separate-none", test=FETCH, toml=(
        '[verifier]\ntimeout_sec = 300\nenvironment_mode = "separate"\nnetwork_mode = "no-network"\n'))
    _, trials = run(runtime, ds, tmp_path / "jobs", name="netpolicy")
    t = by_task(trials)
    assert t["apt-public"].reward == {"reward": 1.0}, t["apt-public"].error
    assert t["apt-none"].reward == {"reward": 0.0}
    # the agent ran without a network, the verifier (public by the environment) had one
    assert t["apt-agent-none"].limits.network_internal is True
    assert t["apt-agent-none"].reward == {"reward": 1.0}
    assert t["apt-separate-none"].reward == {"reward": 0.0}


def test_a_docker_image_that_cannot_be_pulled_is_built_from_the_dockerfile(runtime, tmp_path):
    make_task(tmp_path / "ds", "prebuilt", solve="touch /app/ok\n",
              toml='[environment]\ndocker_image = "orchestra-test/never-published:1"\n')
    make_task(tmp_path / "ds", "present", solve="touch /app/ok\n",
              toml='[environment]\ndocker_image = "orchestra/base:bookworm"\nworkdir = "/app"\n')
    _, trials = run(runtime, tmp_path / "ds", tmp_path / "jobs", name="prebuilt")
    t = by_task(trials)
    assert t["prebuilt"].image_source == "built" and t["prebuilt"].reward == {"reward": 1.0}
    assert t["present"].image_source == "prebuilt" and t["present"].reward == {"reward": 1.0}
    base_id = runtime.api.inspect_image("orchestra/base:bookworm")["Id"].split(":")[-1]
    assert t["present"].image.startswith(f"orchestra/agent/{base_id[:16]}:")  # keyed by id
    # --build-policy: build takes the Dockerfile over a present image; pull insists on a
    # fresh pull (no registry here: a build error that says so, no fallback)
    for policy, want in (("build", ("built", "none")), ("pull", (None, "build_error"))):
        options = JobOptions(job_name=f"policy-{policy}", jobs_dir=tmp_path / "jobs", build_policy=policy)
        present = [x for x in load_tasks(tmp_path / "ds") if x.name.endswith("present")]
        job = run_job(runtime, present, default_manifest("oracle"), options)
        (summary,) = job.trials
        result = json.loads(next((tmp_path / "jobs" / options.job_name / "trials").glob("*/result.json")).read_text())
        assert (result["image_source"] if want[0] else None, summary.failure_mode.value) == want, result["error"]


def test_the_environment_healthcheck_runs_before_the_agent(runtime, tmp_path):
    # The first check fails inside the start period (not counted), the second passes.
    make_task(tmp_path / "ds", "healthy", toml="""
        [environment.healthcheck]
        command = "test -e /tmp/ready || { touch /tmp/ready; false; }"
        interval_sec = 0.2
        start_interval_sec = 0.2
        start_period_sec = 5
        retries = 1
    """, solve="test -e /tmp/ready && touch /app/ok\n")
    make_task(tmp_path / "ds", "never", toml="""
        [environment.healthcheck]
        command = "false"
        interval_sec = 0.1
        retries = 2
    """)
    _, trials = run(runtime, tmp_path / "ds", tmp_path / "jobs", name="health")
    t = by_task(trials)
    assert t["healthy"].healthchecks == 2 and t["healthy"].reward == {"reward": 1.0}
    assert t["never"].failure_mode == "launch_error" and "healthcheck failed 2" in t["never"].error


PIP_DOCKERFILE = """FROM python:3.12-slim-bookworm
WORKDIR /app
RUN pip install --retries 0 --timeout 20 six && python3 -c "import six"
"""


@pytest.mark.part("network-containers")
def test_pip_install_in_a_build_works_through_the_ca_bundle(runtime, tmp_path, container_network):
    """A build's pip reaches PyPI with the host's CA bundle given (--ca-bundle). Without it,
    the build fails on the certificate where a TLS-intercepting proxy stands between (as on
    these machines) and works where the host reaches PyPI directly: the probe decides which."""
    from orchestrator.job.runner import JobOptions, run_job
    from orchestrator.models.manifest import default_manifest
    from orchestrator.tasks.load import load_tasks

    needs_container_network(container_network)
    make_task(tmp_path / "ds", "pip", solve="python3 -c 'import six' && touch /app/ok\n",
              dockerfile=PIP_DOCKERFILE)
    tasks = load_tasks(tmp_path / "ds")
    without = run_job(runtime, tasks, default_manifest("oracle"),
                      JobOptions(job_name="no-ca", jobs_dir=tmp_path / "jobs", max_retries=0))
    if container_network == "intercepted":
        assert without.counts == {"build_error": 1}
        error = json.loads(next((tmp_path / "jobs/no-ca/trials").glob("*/result.json")).read_text())["error"]
        assert "CERTIFICATE" in error.upper() or "SSL" in error.upper(), error[-500:]
    else:
        assert without.counts == {"none": 1} and without.mean_reward == 1.0
    with_ca = run_job(runtime, tasks, default_manifest("oracle"),
                      JobOptions(job_name="ca", jobs_dir=tmp_path / "jobs", ca_bundle=HOST_CA))
    assert with_ca.counts == {"none": 1} and with_ca.mean_reward == 1.0


def _multi_step(root, name: str, first_solution: str, min_reward: str, separate: bool = False) -> None:
    """A two-step Harbor task: write a file, then append to it; shared tests/helpers.sh.
    `separate`: each step graded in a fresh verifier from the task image, given artifacts."""
    task = root / name
    head = ('artifacts = ["/app/out.txt", "/app/setup-ran"]\n[verifier]\nenvironment_mode = "separate"\n'
            if separate else "")
    files = {
        "task.toml": f'schema_version = "1.4"\n{head}[environment]\ncpus = 0.5\n\n[[steps]]\nname = "create"\n'
                     f'min_reward = {min_reward}\n[steps.agent]\ntimeout_sec = 30\n\n'
                     '[[steps]]\nname = "append"\n[steps.verifier]\nenv = { WANT = "two" }\n',
        "environment/Dockerfile": "FROM python:3.12-slim-bookworm\nWORKDIR /app\n",
        "tests/helpers.sh": "score() { mkdir -p /logs/verifier; if eval \"$1\"; then echo 1; else echo 0; fi > /logs/verifier/reward.txt; }\n",
        "steps/create/instruction.md": "Write 'one' to /app/out.txt.\n",
        "steps/create/solution/solve.sh": first_solution,
        "steps/create/tests/test.sh": ". /tests/helpers.sh\nscore '[ \"$(head -1 /app/out.txt)\" = one ]'\n",
        "steps/append/instruction.md": "Append a line from /app/word.txt to /app/out.txt.\n",
        "steps/append/workdir/word.txt": "two\n",
        "steps/append/workdir/setup.sh": "echo prepared > /app/setup-ran\n",
        "steps/append/solution/solve.sh": "cat /app/word.txt >> /app/out.txt\n",
        "steps/append/tests/test.sh": ". /tests/helpers.sh\nscore '[ -e /app/setup-ran ] && [ \"$(tail -1 /app/out.txt)\" = \"$WANT\" ]'\n",
    }
    for rel, text in files.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)


def test_a_multi_step_task_runs_its_steps_in_one_environment_and_stops_below_min_reward(runtime, tmp_path):
    _multi_step(tmp_path / "ds", "two-steps", "echo one > /app/out.txt\n", "1.0")
    _multi_step(tmp_path / "ds", "stops-early", "echo wrong > /app/out.txt\n", "1.0")
    _multi_step(tmp_path / "ds", "goes-on", "echo wrong > /app/out.txt\n", "0.0")
    _, trials = run(runtime, tmp_path / "ds", tmp_path / "jobs", name="steps")
    t = by_task(trials)
    assert [(s.name, s.reward) for s in t["two-steps"].steps] == [
        ("create", {"reward": 1.0}), ("append", {"reward": 1.0})]
    assert t["two-steps"].reward == {"reward": 1.0}
    assert [s.name for s in t["stops-early"].steps] == ["create"]
    assert "below min_reward 1.0" in t["stops-early"].steps[0].stopped
    assert t["stops-early"].reward == {"reward": 0.0}
    # min_reward 0 lets it go on: the mean of 0 and 1 (the file's last line is right)
    assert t["goes-on"].reward == {"reward": 0.5} and len(t["goes-on"].steps) == 2
    folder = next((tmp_path / "jobs/steps/trials").glob("two-steps__*"))
    assert (folder / "steps/create/verifier/reward.txt").read_text().strip() == "1"
    assert (folder / "steps/append/agent/instruction.md").read_text().startswith("Append")


def test_multi_step_tasks_graded_in_separate_verifiers_keep_one_agent_environment(runtime, tmp_path):
    _multi_step(tmp_path / "ds", "two-separate", "echo one > /app/out.txt\n", "1.0", separate=True)
    _multi_step(tmp_path / "ds", "stops-separate", "echo wrong > /app/out.txt\n", "1.0", separate=True)
    _, trials = run(runtime, tmp_path / "ds", tmp_path / "jobs", name="steps-separate")
    t = by_task(trials)
    assert t["two-separate"].verifier_mode == "separate"
    # step two appended to step one's file in the same agent container; each graded apart
    assert [(s.name, s.reward) for s in t["two-separate"].steps] == [
        ("create", {"reward": 1.0}), ("append", {"reward": 1.0})], t["two-separate"].error
    assert [s.name for s in t["stops-separate"].steps] == ["create"]
    assert t["stops-separate"].reward == {"reward": 0.0}
    assert runtime.labelled("orchestra.job=steps-separate") == ([], [], [])


EGRESS_PROBE = r"""
python3 - <<'PY'
import json, os, socket, urllib.error, urllib.request

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:  # honours http_proxy
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return "error"

def connect(host):  # a CONNECT through the proxy, as TLS clients do
    proxy = urllib.request.getproxies()["https"].split("//")[1].rstrip("/")
    s = socket.create_connection(tuple([proxy.split(":")[0], int(proxy.split(":")[1])]), timeout=20)
    s.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    line = s.recv(100).split(b"\r\n")[0].decode()
    s.close()
    return line.split()[1]

def direct():  # around the proxy: no route out
    try:
        socket.create_connection(("151.101.0.223", 443), timeout=5).close()
        return "open"
    except OSError:
        return "blocked"

out = {"allowed_http": get("http://deb.debian.org/debian/dists/bookworm/Release"),
       "refused_http": get("http://pypi.org/simple/"),
       "allowed_connect": connect("deb.debian.org"), "refused_connect": connect("pypi.org"),
       "direct": direct()}
if os.environ.get("ORCHESTRA_RELAY_URL"):  # the relay on the gateway stays direct (NO_PROXY)
    import subprocess
    out["relay"] = subprocess.run(["chan", "whoami"], capture_output=True).returncode
json.dump(out, open(os.environ.get("PROBE_OUT", "/logs/artifacts/egress.json"), "w"))
PY
"""


def test_an_allowlist_lets_one_host_through_and_refuses_another(runtime, tmp_path):
    """network_mode = "allowlist": the agent (and the live verifier under the same
    allowlist) reach deb.debian.org through orchestra's filtering proxy, plain HTTP and
    CONNECT; pypi.org is refused by the proxy; a direct connection has no route out."""
    toml = ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["deb.debian.org"]\n'
            '[verifier]\ntimeout_sec = 120\n[relay]\nenabled = true\n')
    test = ("mkdir -p /logs/verifier\nPROBE_OUT=/tmp/v.json bash /tests/probe.sh\n"
            "python3 -c \"import json; d = json.load(open('/tmp/v.json')); print(d); "
            "ok = d['allowed_http'] == 200 and d['refused_http'] == 403 and d['direct'] == 'blocked'; "
            "open('/logs/verifier/reward.txt', 'w').write('1' if ok else '0')\"\n")
    make_task(tmp_path / "ds", "allow", solve=EGRESS_PROBE, toml=toml, test=test,
              files={"tests/probe.sh": EGRESS_PROBE})
    _, trials = run(runtime, tmp_path / "ds", tmp_path / "jobs", name="allowlist")
    (result,) = trials
    probe = json.loads((tmp_path / "jobs/allowlist/trials" / next(
        p.name for p in (tmp_path / "jobs/allowlist/trials").iterdir()) / "artifacts/egress.json").read_text())
    assert probe["allowed_http"] == 200 and probe["allowed_connect"] == "200"
    assert probe["refused_http"] == 403 and probe["refused_connect"] == "403"
    assert probe["direct"] == "blocked" and result.limits.network_internal is True
    assert probe["relay"] == 0
    assert result.reward == {"reward": 1.0}, result.error  # the verifier under the same allowlist
    assert result.egress.allowed["deb.debian.org"] >= 3 and result.egress.refused["pypi.org"] >= 3
    assert runtime.labelled("orchestra.job=allowlist") == ([], [], [])


COMPOSE = """
services:
  main:
    depends_on:
      api:
        condition: service_healthy
    environment:
      API_URL: http://api:8080/
    volumes:
      - shared:/shared
  api:
    build:
      context: ./api
    command: ["python3", "/srv/server.py"]
    environment:
      - GREETING=hello from api
    volumes:
      - shared:/shared
    healthcheck:
      test: ["CMD", "python3", "-c", "import urllib.request; urllib.request.urlopen('http://localhost:8080/')"]
      interval: 1s
      timeout: 2s
      retries: 20
volumes:
  shared:
"""
API_SERVER = """
import http.server, os
open("/shared/from-api", "w").write("written by the sidecar")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = os.environ["GREETING"].encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("0.0.0.0", 8080), H).serve_forever()
"""


def test_a_compose_sidecar_built_from_the_task_answers_by_name_and_is_removed_after(runtime, tmp_path):
    """environment/docker-compose.yaml: a sidecar built from the task folder, healthy before
    the agent starts, answers at http://api:8080/ on the trial network, shares a named volume
    with main, is graded live and is removed (with its volume) after the trial."""
    solve = ("python3 -c \"import os, urllib.request; print(urllib.request.urlopen(os.environ['API_URL']).read().decode())\""
             " > /app/answer.txt\ncat /shared/from-api > /app/volume.txt\n")
    test = ("mkdir -p /logs/verifier\n"
            "if [ \"$(cat /app/answer.txt)\" = 'hello from api' ] && grep -q sidecar /app/volume.txt && "
            "python3 -c \"import urllib.request; urllib.request.urlopen('http://api:8080/')\"; "
            "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    make_task(tmp_path / "ds", "with-api", solve=solve, test=test, files={
        "environment/docker-compose.yaml": COMPOSE,
        "environment/api/Dockerfile": "FROM python:3.12-slim-bookworm\nCOPY server.py /srv/server.py\n",
        "environment/api/server.py": API_SERVER})
    seen: dict = {}

    def watch():  # the sidecar, while it runs: its name on the trial network and its labels
        for _ in range(300):
            for c in runtime.api.containers(filters={"label": ["orchestra.job=compose", "orchestra.kind=sidecar"]}):
                info = runtime.api.inspect_container(c["Id"])
                seen.update(aliases=[a for n in info["NetworkSettings"]["Networks"].values() for a in (n["Aliases"] or [])],
                            memory=info["HostConfig"]["Memory"], labels=info["Config"]["Labels"])
                return
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    _, trials = run(runtime, tmp_path / "ds", tmp_path / "jobs", name="compose")
    watcher.join()
    (result,) = trials
    assert result.reward == {"reward": 1.0}, (result.error, result.failure_mode)
    assert result.compose_services == ["api"]
    assert "api" in seen["aliases"] and seen["memory"] > 0 and "orchestra.pid" in seen["labels"]
    assert runtime.labelled("orchestra.job=compose") == ([], [], [])  # containers, networks, volumes


def test_compose_fields_orchestra_cannot_run_are_refused_by_name(tmp_path):
    from orchestrator.errors import InputError
    from orchestrator.tasks.load import load_task

    bad = "services:\n  db:\n    image: postgres\n    ports: ['5432:5432']\n    privileged: true\n"
    task = make_task(tmp_path / "ds", "bad-compose", files={"environment/docker-compose.yaml": bad})
    try:
        load_task(task)
    except InputError as exc:
        text = str(exc)
    else:
        raise AssertionError("a compose file with ports was accepted")
    assert "orchestra cannot honour `services.db.ports`" in text
    assert "orchestra cannot honour `services.db.privileged`" in text


def test_a_separate_verifier_runs_in_the_image_built_from_tests_with_its_own_limits(runtime, tmp_path):
    """Harbor's separate mode: [verifier.environment] implies it; the verifier container is
    built from tests/Dockerfile (tests/ as context) under the verifier environment's quotas,
    and gets the agent's artifacts, never the agent's other files."""
    toml = ('artifacts = ["/tmp/configured.txt"]\n[verifier]\ntimeout_sec = 120\n'
            '[verifier.environment]\ncpus = 0.5\nmemory_mb = 384\nnetwork_mode = "no-network"\n')
    solve = ("echo separate > /logs/artifacts/mode.txt\necho yes > /tmp/configured.txt\n"
             "echo leaked > /tmp/agent-only.txt\n")
    test = ("ok=1\n[ \"$(cat /logs/artifacts/mode.txt)\" = separate ] || ok=0\n"
            "[ -f /tmp/configured.txt ] || ok=0\n[ -e /tmp/agent-only.txt ] && ok=0\n"
            "[ -f /verifier-only ] || ok=0\nmkdir -p /logs/verifier; echo $ok > /logs/verifier/reward.txt\n")
    make_task(tmp_path / "ds", "sep", solve=solve, test=test, toml=toml, files={
        "tests/Dockerfile": "FROM python:3.12-slim-bookworm\nRUN touch /verifier-only\nCOPY test.sh /tests/test.sh\n"})
    _, trials = run(runtime, tmp_path / "ds", tmp_path / "jobs", name="separate-env")
    (result,) = trials
    assert result.verifier_mode == "separate" and result.verifier_image == "tests/Dockerfile"
    assert result.reward == {"reward": 1.0}, result.error
    assert result.verifier_limits.memory_bytes == 384 * 2**20 and result.verifier_forgeable is False


def test_a_stand_in_never_moves_an_existing_tag_and_a_task_image_is_never_the_base(runtime, tmp_path):
    """An engine-wide name someone else owns stays theirs: FROM it uses their image as is
    (no stand-in, no tag made or moved), and an image that inherited the base's labels (a
    task image) is never taken for the base. A reference the engine lacks is built on a
    stand-in without any tag being made for it. The name is this test's own (a python tag
    no other test builds FROM), so it runs beside other tests' jobs."""
    import uuid

    from orchestrator.trial.bases import _orchestra_base, resolve_bases
    from orchestrator.trial.images import BASE_IMAGE

    owned = f"3.11-slim-owned-{uuid.uuid4().hex[:8]}"
    alias = f"python:{owned}"
    assert not runtime.image_exists(alias)
    make_task(tmp_path / "ds", "child", solve="touch /app/ok\n",
              dockerfile="FROM python:3.12.99-slim\nWORKDIR /app\n")
    _, (child,) = run(runtime, tmp_path / "ds", tmp_path / "jobs", name="child")
    assert child.reward == {"reward": 1.0}, child.error
    assert child.base_alias == {"python:3.12.99-slim": BASE_IMAGE}
    assert child.stand_ins[0].python == "3.11" and "python 3.12" in child.stand_ins[0].reason
    assert not runtime.image_exists("python:3.12.99-slim")  # built on the base, no tag made
    theirs = runtime.api.inspect_image(child.image)["Id"]  # a child of the base, same labels
    assert runtime.api.inspect_image(child.image)["Config"]["Labels"].get("orchestra.image.kind")
    runtime.api.tag(theirs, "python", owned)  # someone's image under the name
    try:
        [used] = resolve_bases(runtime, f"FROM {alias}\nRUN true\n")  # used as it is: no pull, no stand-in
        assert (used.record.source, used.record.image_id, used.stand_in) == ("local", theirs, None)
        assert runtime.api.inspect_image(alias)["Id"] == theirs  # the tag did not move
        assert not _orchestra_base(runtime, alias) and not _orchestra_base(runtime, child.image)
        assert _orchestra_base(runtime, BASE_IMAGE)
    finally:
        runtime.api.remove_image(alias)


def test_tasks_check_lists_what_each_task_needs_that_this_host_lacks(runtime, tmp_path):
    import subprocess
    import sys

    make_task(tmp_path / "ds", "needy", toml="[environment]\ncpus = 64\n",
              dockerfile="FROM node:20-bookworm\nRUN apt-get update\n",
              test="curl -s https://example.com > /dev/null\n")
    make_task(tmp_path / "ds", "modest", toml="[environment]\ncpus = 0.5\n")
    out = subprocess.run([str(Path(sys.executable).parent / "orchestra"), "tasks", "check", str(tmp_path / "ds")],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    needy = out.stdout.split("ok  ds/needy")[1].split("ok  ")[0]
    assert "FROM node:20-bookworm is not on this engine and no offline base stands in" in needy
    assert "cpus = 64, the engine has" in needy and "infeasible here" in needy
    assert "the network at build time (a RUN line uses apt-get)" in needy
    assert "the network at grading time (test.sh uses curl" in needy
    modest = out.stdout.split("ok  ds/modest")[1].split("ok  ")[0]
    # FROM python:3.12-slim-bookworm: built on a stand-in, said with the rule that chose it
    assert [line.strip() for line in modest.splitlines() if "needs:" in line] in (
        [], ["needs: environment/Dockerfile: FROM python:3.12-slim-bookworm is not on this engine: pulled at "
             "run time; where no registry answers (or --bases offline), orchestra/base:bookworm stands in: "
             "python 3.12 on bookworm asked; the tag's release decides, and bookworm's python is 3.11. "
             "Warning: python 3.11, NOT the python 3.12 the tag names (bookworm has no other)"]), modest


def test_copy_chmod_builds_on_the_classic_builder_and_logs_are_there_from_the_start(runtime, tmp_path):
    """Two shapes of Harbor's own example tasks: `COPY --chmod=755` (BuildKit-only; docker-py
    drives the classic builder, which refused it: 15 of 32 examples were build errors), and
    a solution that checks /logs/verifier exists during the agent phase, as under Harbor."""
    make_task(tmp_path / "ds", "chmod", files={"environment/entrypoint.sh": "#!/bin/sh\necho ran\n"},
              dockerfile="FROM python:3.12-slim-bookworm\nRUN useradd -m app\nUSER app\n"
                         "COPY --chmod=755 entrypoint.sh /entrypoint.sh\nWORKDIR /app\nUSER root\n",
              solve='[ -d /logs/verifier ] && [ "$(/entrypoint.sh)" = ran ] && touch /app/ok\n')
    assert oct((tmp_path / "ds/chmod/environment/entrypoint.sh").stat().st_mode & 0o777) == "0o644"  # not executable as shipped
    # an image that ships /logs/... itself (copied up into the trial's /logs volume)
    make_task(tmp_path / "ds", "own-logs", dockerfile="FROM python:3.12-slim-bookworm\nWORKDIR /app\n"
              "RUN mkdir -p /logs/agent /logs/verifier /logs/artifacts\n", solve="touch /app/ok\n")
    _, trials = run(runtime, tmp_path / "ds", tmp_path / "jobs")
    assert {t.task.split("/")[-1]: (t.failure_mode, t.headline) for t in trials} == {
        "chmod": ("none", 1.0), "own-logs": ("none", 1.0)}, [t.error for t in trials]
