"""Bases as Docker would get them (DESIGN 5): a FROM the engine lacks is pulled through the
engine's registry mirror (Debian's docker-registry on 127.0.0.1:5678, daemon.json's
registry-mirrors), its digest recorded; a name no registry has falls back to a stand-in,
the pull's error recorded as the reason and said once; --bases offline pulls nothing and
--bases pull makes the failed pull the task's build error. An image the engine already has
under the FROM name is used as it is. A tests/Dockerfile build trusts --ca-bundle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import structlog
from conftest import make_task
from parts import REGISTRY, _wait_port

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import TrialResult
from orchestrator.runtime.client import EngineClient
from orchestrator.tasks.load import load_tasks

# removes and re-pulls shared bases (python:3.12-slim) other tests' builds start FROM
pytestmark = pytest.mark.exclusive

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
MIRROR = "127.0.0.1:5678"
MIRRORED = "python:3.12-slim"  # what the mirror serves (as library/python:3.12-slim)
MISSING = "python:3.11-slim"  # what it lacks: the engine then asks Docker Hub, unreachable here
MARKER_TEST = """mkdir -p /logs/verifier
if grep -q {word} /base-marker 2>/dev/null; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


def _mirror_configured() -> bool:
    try:
        config = json.loads(Path("/etc/docker/daemon.json").read_text())
    except (OSError, ValueError):
        return False
    return f"http://{MIRROR}" in config.get("registry-mirrors", [])


def _build(client: EngineClient, dockerfile: str, tag: str) -> str:
    from orchestrator.archive import tar_files

    for chunk in client.build(tar_files({"Dockerfile": dockerfile.encode()}), tag, {}, 300):
        assert "error" not in chunk, chunk
    return client.inspect_image(tag)["Id"]


@pytest.fixture(scope="module")
def mirror(tmp_path_factory, runtime):
    """The engine's registry mirror, serving an image of ours (orchestra/base:bookworm and a
    marker layer) as library/python:3.12-slim; the digest the push reported."""
    if not os.path.exists(REGISTRY):
        pytest.skip("docker-registry is not installed (make test installs it)")
    if not _mirror_configured():
        pytest.skip(f"/etc/docker/daemon.json has no registry-mirrors entry http://{MIRROR} "
                    "(scripts/ensure-docker.sh adds it)")
    root = tmp_path_factory.mktemp("mirror")
    (root / "config.yml").write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"http:\n  addr: {MIRROR}\n")
    server = subprocess.Popen([REGISTRY, "serve", str(root / "config.yml")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = EngineClient()
    pushed_name = f"{MIRROR}/library/python"
    try:
        _wait_port(int(MIRROR.rsplit(":", 1)[1]))
        for ref in (MIRRORED, MISSING):  # the engine must lack both: they are to be pulled
            runtime.remove_image(ref)
        _build(client, "FROM orchestra/base:bookworm\nRUN echo from-the-mirror > /base-marker\n",
               f"{pushed_name}:3.12-slim")
        digest = None
        for chunk in client.push(pushed_name, "3.12-slim"):
            assert "error" not in chunk, chunk
            digest = (chunk.get("aux") or {}).get("Digest") or digest
        client.remove_image(f"{pushed_name}:3.12-slim", force=True)
        assert digest and digest.startswith("sha256:")
        yield digest
    finally:
        for ref in (MIRRORED, MISSING, f"{pushed_name}:3.12-slim"):
            runtime.remove_image(ref)  # other tests find the engine as it was
        server.terminate()
        server.wait(timeout=10)
        client.close()


def _job(runtime, ds: Path, jobs: Path, name: str, **options) -> list[TrialResult]:
    job = JobOptions(job_name=name, jobs_dir=jobs, n_concurrent=4, k=options.pop("k", 1), **options)
    run_job(runtime, load_tasks(ds), default_manifest("oracle"), job)
    return [TrialResult.model_validate_json(p.read_text())
            for p in sorted((jobs / name / "trials").glob("*/result.json"))]


def _cli(ds: Path, jobs: Path, name: str, *flags: str) -> list[TrialResult]:
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(ds), "--agent", "oracle", "-q",
                           "--jobs-dir", str(jobs), "--job-name", name, *flags],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [TrialResult.model_validate_json(p.read_text())
            for p in sorted((jobs / name / "trials").glob("*/result.json"))]


@pytest.mark.part("registry-mirror")
def test_a_base_the_engine_lacks_is_pulled_through_the_mirror_else_stood_in_with_the_pull_error(
        mirror, runtime, tmp_path):
    ds = tmp_path / "ds"
    make_task(ds, "mirrored", dockerfile=f"FROM {MIRRORED}\nWORKDIR /app\n",
              test=MARKER_TEST.format(word="from-the-mirror"))
    make_task(ds, "missing", dockerfile=f"FROM {MISSING}\nWORKDIR /app\n", solve="touch /app/ok\n")
    make_task(ds, "broken", dockerfile=f"FROM {MISSING}\nRUN exit 7\n")
    pinned = f"{MIRRORED}@{mirror}"  # the same image, pinned by its digest: its own job below,
    # since an image this job pulled under its name is the engine's own to a digest reference
    make_task(tmp_path / "pin-ds", "pinned", dockerfile=f"FROM {pinned}\nWORKDIR /app\n",
              test=MARKER_TEST.format(word="from-the-mirror"))
    with structlog.testing.capture_logs() as events:
        trials = _job(runtime, ds, tmp_path / "jobs", "bases-auto", k=2)
    by = {}
    for trial in trials:
        by.setdefault(trial.task.split("/")[-1], []).append(trial)
    # pulled through the mirror: the marker is in the trial's container, the digest recorded
    for trial in by["mirrored"]:
        assert trial.reward == {"reward": 1.0}, trial.error
        [base] = trial.bases
        assert (base.reference, base.source, base.digest) == (MIRRORED, "pulled", mirror), base
        assert trial.stand_ins == []
    assert runtime.image_exists(MIRRORED)
    runtime.remove_image(MIRRORED)  # the engine lacks it again: the pinned reference is pulled
    for trial in _job(runtime, tmp_path / "pin-ds", tmp_path / "jobs", "bases-pinned"):
        assert trial.reward == {"reward": 1.0}, trial.error
        assert [(b.reference, b.source, b.digest) for b in trial.bases] == [(pinned, "pulled", mirror)]
    runtime.remove_image(pinned)
    # a name the mirror lacks: the engine's pull failed (no registry answered): a stand-in,
    # the pull's error its reason, on every trial; said once for the job
    for trial in by["missing"]:
        assert trial.reward == {"reward": 1.0}, trial.error
        [base] = trial.bases
        assert base.source == "stand-in" and base.stand_in == "orchestra/base:bookworm", base
        assert base.pull_error and f"pull {MISSING}" in base.pull_error and base.pull_error in base.reason
        assert trial.stand_ins[0].reference == MISSING
    said = [e for e in events if e["event"] == "image.stand_in" and e["log_level"] == "warning"]
    assert [e["reference"] for e in said] == [MISSING], said
    pulls = [e for e in events if e["event"] == "image.base_pulled"]
    assert [e["reference"] for e in pulls] == [MIRRORED], pulls  # once per job, not per trial
    # a failed build on a stand-in names the reference, the stand-in and the failed pull
    for trial in by["broken"]:
        assert trial.failure_mode == "build_error"
        failure = trial.build_failure
        assert failure is not None and failure.reference == MISSING, failure
        assert failure.stand_in == "orchestra/base:bookworm" and f"pull {MISSING}" in (failure.pull_error or "")
        assert f"FROM {MISSING} stood in by orchestra/base:bookworm" in (trial.error or ""), trial.error

    # --bases offline: nothing pulled, the stand-in used and said why
    runtime.remove_image(MIRRORED)
    one = tmp_path / "one"
    shutil.copytree(ds / "mirrored", one / "mirrored")
    [trial] = _cli(one, tmp_path / "jobs", "bases-offline", "--bases", "offline")
    assert trial.reward == {"reward": 0.0}  # the stand-in has no marker
    [base] = trial.bases
    assert base.source == "stand-in" and "--bases offline" in (base.reason or "") and base.pull_error is None
    assert not runtime.image_exists(MIRRORED)  # nothing was pulled

    # --bases pull: a pull that fails is the task's build error, naming it
    two = tmp_path / "two"
    shutil.copytree(ds / "missing", two / "missing")
    [trial] = _cli(two, tmp_path / "jobs", "bases-pull", "--bases", "pull")
    assert trial.failure_mode == "build_error" and f"FROM {MISSING}: the pull failed" in (trial.error or "")
    assert trial.build_failure is not None and trial.build_failure.reference == MISSING
    assert trial.build_failure.stand_in is None and trial.build_failure.pull_error
    assert [(b.reference, b.source) for b in trial.bases] == [(MISSING, "failed")]


def test_an_image_the_engine_has_under_the_from_name_is_used_as_it_is(runtime, tmp_path):
    """The issue's case: python:3.12.11-slim-bookworm built here (FROM orchestra's base, so
    it inherits the base's labels) used to be taken for an old alias of the base and stood
    in for; the marker was missing."""
    name = "python:3.12.11-slim-bookworm"
    if runtime.image_exists(name):
        pytest.skip(f"{name} is on this engine already (not ours to replace)")
    client = EngineClient()
    word = uuid.uuid4().hex[:12]
    try:
        image_id = _build(client, f"FROM orchestra/base:bookworm\nRUN echo {word} > /base-marker\n", name)
        make_task(tmp_path / "ds", "local-base", dockerfile=f"FROM {name}\nWORKDIR /app\n",
                  test=MARKER_TEST.format(word=word))
        for mode in ("auto", "offline"):  # offline too: the engine's own image is no pull
            [trial] = _job(runtime, tmp_path / "ds", tmp_path / "jobs", f"local-{mode}", bases=mode)
            assert trial.reward == {"reward": 1.0}, (mode, trial.error, trial.bases)
            [base] = trial.bases
            assert (base.source, base.image_id, base.stand_in) == ("local", image_id, None), base
            assert trial.stand_ins == []
    finally:
        runtime.remove_image(name)
        client.close()


def test_a_tests_dockerfile_build_trusts_the_ca_bundle(runtime, tmp_path):
    """The verifier image (tests/Dockerfile) is built through the task image's build path:
    with --ca-bundle, its RUN steps see the bundle at SSL_CERT_FILE (and pip's, requests')."""
    bundle = tmp_path / "proxy-ca.pem"
    bundle.write_bytes(Path("/etc/ssl/certs/ca-certificates.crt").read_bytes())
    tests_dockerfile = ("FROM orchestra/base:bookworm\n"
                        'RUN test -s "$SSL_CERT_FILE" && test "$PIP_CERT" = "$SSL_CERT_FILE" '
                        '&& grep -q "BEGIN CERTIFICATE" "$SSL_CERT_FILE" && touch /ca-seen-at-build\n')
    make_task(tmp_path / "ds", "verifier-ca",
              toml='[verifier]\nenvironment_mode = "separate"\n',
              test="mkdir -p /logs/verifier\n"
                   "if [ -e /ca-seen-at-build ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
              files={"tests/Dockerfile": tests_dockerfile})
    [trial] = _job(runtime, tmp_path / "ds", tmp_path / "jobs", "verifier-ca", ca_bundle=bundle)
    assert trial.reward == {"reward": 1.0}, trial.error
    assert trial.verifier_image == "tests/Dockerfile"
    assert [b.used_for for b in trial.bases] == ["task", "verifier"], trial.bases
    assert trial.bases[1].source == "orchestra", trial.bases
    # without the bundle the same build fails, and the result says which FROM it started on
    [bare] = _job(runtime, tmp_path / "ds", tmp_path / "jobs", "verifier-no-ca")
    assert bare.failure_mode == "build_error", bare.error
    assert bare.build_failure is not None and bare.build_failure.reference == "orchestra/base:bookworm"


def test_a_private_registry_base_is_pulled_with_the_configs_credentials_and_refused_without(runtime, tmp_path):
    """FROM a private registry's image: pulled with the Docker config's login (docker-py
    reads DOCKER_CONFIG), its digest recorded; without the login the registry answers and
    refuses, which is no reason for a stand-in: the task's build error names the reference."""
    from parts import private_registry

    with private_registry(tmp_path / "registry") as reg:
        name, tag = f"{reg.host}/orchestra-test/python", f"base-{os.getpid()}"
        env = {**os.environ, "DOCKER_CONFIG": str(reg.credentials)}
        word = uuid.uuid4().hex[:12]
        build = subprocess.run(["docker", "build", "-q", "-t", f"{name}:{tag}", "-"], text=True, env=env,
                               input=f"FROM orchestra/base:bookworm\nRUN echo {word} > /base-marker\n",
                               capture_output=True, timeout=300)
        assert build.returncode == 0, build.stderr
        push = subprocess.run(["docker", "push", f"{name}:{tag}"], capture_output=True, text=True, env=env,
                              timeout=300)
        assert push.returncode == 0, push.stderr
        digest = push.stdout.split("digest: ")[1].split()[0]
        runtime.remove_image(f"{name}:{tag}")
        make_task(tmp_path / "ds", "private-base", dockerfile=f"FROM {name}:{tag}\nWORKDIR /app\n",
                  test=MARKER_TEST.format(word=word))
        try:
            # the credentials go only to a registry the user names (issue 56): not named, none sent
            proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-q",
                                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "private-unnamed"],
                                  capture_output=True, text=True, env=env, timeout=600)
            assert proc.returncode == 0, proc.stderr[-2000:]
            [unnamed] = [TrialResult.model_validate_json(p.read_text())
                         for p in (tmp_path / "jobs/private-unnamed/trials").glob("*/result.json")]
            assert unnamed.failure_mode == "build_error" and unnamed.build_failure is not None
            assert "no basic auth credentials" in (unnamed.build_failure.pull_error or ""), unnamed.build_failure
            proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-q",
                                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "private-base",
                                   "--registry-auth", reg.host],
                                  capture_output=True, text=True, env=env, timeout=600)
            assert proc.returncode == 0, proc.stderr[-2000:]
            [trial] = [TrialResult.model_validate_json(p.read_text())
                       for p in (tmp_path / "jobs/private-base/trials").glob("*/result.json")]
            assert trial.reward == {"reward": 1.0}, trial.error
            [base] = trial.bases
            assert (base.source, base.digest) == ("pulled", digest), base
            runtime.remove_image(f"{name}:{tag}")
            empty = tmp_path / "no-login"
            empty.mkdir()
            proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-q",
                                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "private-refused"],
                                  capture_output=True, text=True, env={**env, "DOCKER_CONFIG": str(empty)},
                                  timeout=600)
            assert proc.returncode == 0, proc.stderr[-2000:]
            [trial] = [TrialResult.model_validate_json(p.read_text())
                       for p in (tmp_path / "jobs/private-refused/trials").glob("*/result.json")]
            assert trial.failure_mode == "build_error" and "a registry answered and refused" in (trial.error or "")
            assert trial.build_failure is not None and trial.build_failure.reference == f"{name}:{tag}"
            assert "no basic auth credentials" in (trial.build_failure.pull_error or ""), trial.build_failure
        finally:
            runtime.remove_image(f"{name}:{tag}")
