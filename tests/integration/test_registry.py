"""A task whose `docker_image` lives only in a private registry with authentication:
Debian's docker-registry (distribution 2.8) with htpasswd on loopback, credentials in a
DOCKER_CONFIG folder's config.json. docker-py reads them on every pull: the task is pulled
under every --build-policy; without the credentials the pull is refused and said so."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_task
from parts import private_registry

from orchestrator.runtime.client import EngineClient

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with private_registry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg.host, reg.credentials


@pytest.mark.part("registry")
def test_a_private_image_is_pulled_with_the_configs_credentials_under_every_policy(
        registry, runtime, tmp_path, monkeypatch):
    host, credentials = registry
    image = f"{host}/orchestra-test/private:{os.getpid()}"
    monkeypatch.setenv("DOCKER_CONFIG", str(credentials))
    pusher = EngineClient()  # reads DOCKER_CONFIG as it is made
    pusher.tag("orchestra/base:bookworm", image.rsplit(":", 1)[0], image.rsplit(":", 1)[1])
    pushed = list(pusher.push(image.rsplit(":", 1)[0], image.rsplit(":", 1)[1]))
    assert not [p for p in pushed if "error" in p], pushed
    task = make_task(tmp_path / "ds", "private", toml=f'[environment]\ndocker_image = "{image}"\n',
                     solve="touch /app/ok\n")
    (task / "environment/Dockerfile").unlink()  # only the registry has it
    env = {**os.environ, "DOCKER_CONFIG": str(credentials), "ORCHESTRA_REGISTRY_AUTH": host}  # named: trusted
    sources = {}
    for policy in ("prefer-prebuilt", "pull", "build"):
        pusher.remove_image(image, force=True)  # gone locally: each policy must pull it
        proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-q",
                               "--build-policy", policy, "--jobs-dir", str(tmp_path / "jobs"),
                               "--job-name", f"private-{policy}"], capture_output=True, text=True,
                              env=env, timeout=600)
        assert proc.returncode == 0, (policy, proc.stderr[-2000:])
        trial = json.loads(next((tmp_path / f"jobs/private-{policy}/trials").glob("*/result.json")).read_text())
        assert trial["reward"] == {"reward": 1.0}, (policy, trial["error"])
        sources[policy] = trial["image_source"]
    assert sources == {"prefer-prebuilt": "pulled", "pull": "pulled", "build": "pulled"}
    # without the credentials: the registry refuses, and the trial says why
    pusher.remove_image(image, force=True)
    empty = tmp_path / "no-credentials"
    empty.mkdir()
    refused = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-q",
                              "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "private-refused"],
                             capture_output=True, text=True, env={**env, "DOCKER_CONFIG": str(empty)}, timeout=600)
    trial = json.loads(next((tmp_path / "jobs/private-refused/trials").glob("*/result.json")).read_text())
    assert trial["failure_mode"] == "build_error" and "no basic auth credentials" in trial["error"], trial["error"]
    assert refused.returncode == 0  # a build error is the task's result, not a gate
    pusher.close()


@pytest.mark.part("registry")
def test_registry_pushes_what_the_job_built_and_a_refused_login_stops_it_before_any_trial(
        registry, tmp_path):
    host, credentials = registry
    make_task(tmp_path / "ds", "to-push", solve="touch /app/ok\n")
    common = [ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-q",
              "--jobs-dir", str(tmp_path / "jobs"), "--registry", f"{host}/orchestra-test"]
    env = {**os.environ, "DOCKER_CONFIG": str(credentials)}
    proc = subprocess.run([*common, "--job-name", "pushed", "--json", "-"], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    job = json.loads(proc.stdout)
    assert job["mean_reward"] == 1.0 and job["images_pushed"] == 2, job
    trial = json.loads(next((tmp_path / "jobs/pushed/trials").glob("*/result.json")).read_text())
    repository, tag = trial["image"].rsplit(":", 1)
    # the registry holds the agent image under HOST/PREFIX/<local name, flattened>
    flat = repository.replace("/", "__")
    tags = subprocess.run(["curl", "-sf", "-u", "orchestra:s3cret-pass",
                           f"http://{host}/v2/orchestra-test/{flat}/tags/list"],
                          capture_output=True, text=True, timeout=30)
    assert tag in json.loads(tags.stdout)["tags"], tags.stdout
    # a wrong password: refused before any trial, exit 2, naming the option
    bad = tmp_path / "bad-config"
    bad.mkdir()
    wrong = base64.b64encode(b"orchestra:wrong").decode()
    (bad / "config.json").write_text(json.dumps({"auths": {host: {"auth": wrong}}}))
    refused = subprocess.run([*common, "--job-name", "refused"], capture_output=True, text=True,
                             env={**env, "DOCKER_CONFIG": str(bad)}, timeout=120)
    assert refused.returncode == 2 and "--registry" in refused.stderr, refused.stderr[-2000:]
    assert not (tmp_path / "jobs/refused/trials").exists()
