"""Short secrets (issue 45): a value orchestra hands a trial is scrubbed whatever its length,
a short one (8 to 11 characters) wherever it appears, inside words too (issue 56), and one
too short to scrub at all is refused where it is given (exit 2 naming the field)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestrator import scrub
from orchestrator.errors import InputError
from orchestrator.job.preflight import preflight
from orchestrator.models.endpoint import load_endpoints
from orchestrator.models.manifest import Manifest
from orchestrator.tasks.compose import HostEnv, load_compose

SHORT = "k3y-8chr"  # 8 characters: a judge key, a local model key, an allowed host variable


def test_a_short_secret_is_scrubbed_wherever_it_appears(tmp_path):
    """Issue 56: whole-token matching kept `x<secret>`, a leak an agent could choose; a short
    secret is replaced inside words too, as a long one is."""
    text = f"KEY={SHORT}\n[{SHORT}] '{SHORT[::-1]}' x{SHORT} {SHORT}y {SHORT}_2 {SHORT}-end"
    out = scrub.scrub_text(text, [SHORT])
    assert out.count(scrub.REDACTED) == 7 and SHORT not in out and SHORT[::-1] not in out
    assert scrub.found_in(f"echo {SHORT}", [SHORT]) == [SHORT]
    assert scrub.found_in(f"echo x{SHORT}y", [SHORT]) == [SHORT]
    (tmp_path / "stdout.txt").write_text(f"judge={SHORT}\nnot x{SHORT}\n")
    (tmp_path / "traj.jsonl").write_text(json.dumps({"said": f"the key is {SHORT}."}) + "\n")
    assert scrub.scrub_tree(tmp_path, [SHORT]) == ["stdout.txt", "traj.jsonl"]
    assert (tmp_path / "stdout.txt").read_text() == f"judge={scrub.REDACTED}\nnot x{scrub.REDACTED}\n"
    assert json.loads((tmp_path / "traj.jsonl").read_text()) == {"said": f"the key is {scrub.REDACTED}."}


def test_a_long_secret_is_still_scrubbed_anywhere():
    secret = "0123456789abcdef"
    assert scrub.scrub_text(f"x{secret}y", [secret]) == f"x{scrub.REDACTED}y"


def test_registering_short_values_scrubs_them_from_log_events_and_refuses_shorter_ones():
    scrub.register(SHORT)
    try:
        assert SHORT in scrub.current()
        event = scrub.structlog_processor(None, "info", {"event": "x", "line": f"token {SHORT}"})
        assert event["line"] == f"token {scrub.REDACTED}"
    finally:
        scrub.unregister(SHORT)
    assert SHORT not in scrub.current()
    with pytest.raises(ValueError, match="7 characters"):
        scrub.register("abc1234")
    scrub.register(None, "")  # nothing given: nothing to scrub, no error


def test_an_allowed_host_variable_too_short_to_scrub_is_refused_naming_the_field(tmp_path, monkeypatch):
    monkeypatch.setenv("DATASET_TOKEN", "abc12")
    path = tmp_path / "task/environment/docker-compose.yaml"
    path.parent.mkdir(parents=True)
    path.write_text('services:\n  main:\n    environment:\n      TOKEN: "${DATASET_TOKEN}"\n')
    host = HostEnv(allowed=["DATASET_TOKEN"], where="environment/docker-compose.yaml: ")
    with pytest.raises(InputError, match=r"services.main.environment.TOKEN.*DATASET_TOKEN.*5 characters"):
        host.get("DATASET_TOKEN", "services.main.environment.TOKEN")
    from orchestrator.tasks import compose
    monkeypatch.setattr(compose, "_allowed_host_env", frozenset({"DATASET_TOKEN"}))
    with pytest.raises(InputError, match="docker-compose.yaml.*DATASET_TOKEN"):
        load_compose(path)
    monkeypatch.setenv("DATASET_TOKEN", SHORT)  # 8 characters: given, and kept to be scrubbed
    assert load_compose(path).host_values == {"DATASET_TOKEN": SHORT}


def test_an_endpoint_key_too_short_to_scrub_is_refused_at_preflight(tmp_path, monkeypatch):
    config = tmp_path / "endpoints.json"
    config.write_text(json.dumps({"local": {"base_url": "http://127.0.0.1:9/v1", "model": "m",
                                            "api_key_env": "H3_LOCAL_KEY"}}))
    manifest = Manifest.model_validate({"roster": [{"id": "lead", "kind": "orchestrator", "agent": "reference", "endpoint": "local"}]})
    monkeypatch.setenv("H3_LOCAL_KEY", "EMPTY")
    with pytest.raises(InputError) as refused:
        preflight([], manifest, load_endpoints([config]))
    assert any("'local'" in p and "$H3_LOCAL_KEY" in p and "5 characters" in p for p in refused.value.problems)
    monkeypatch.setenv("H3_LOCAL_KEY", SHORT)
    assert preflight([], manifest, load_endpoints([config])) == {"local"}
    assert os.environ["H3_LOCAL_KEY"] == SHORT and Path(config).is_file()


def test_a_verifier_env_value_too_short_to_scrub_is_refused_at_preflight_naming_the_task(tmp_path, monkeypatch):
    from orchestrator.tasks import compose, load_tasks
    task = tmp_path / "ds/vshort"
    for folder in ("environment", "tests", "solution"):
        (task / folder).mkdir(parents=True)
    (task / "solution/solve.sh").write_text("#!/bin/bash\n")
    (task / "task.toml").write_text('[verifier]\nenv = {J = "${JUDGE_KEY}"}\n')
    (task / "instruction.md").write_text("x\n")
    (task / "environment/Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (task / "tests/test.sh").write_text("#!/bin/bash\n")
    monkeypatch.setattr(compose, "_allowed_host_env", frozenset({"JUDGE_KEY"}))
    monkeypatch.setenv("JUDGE_KEY", "abc12")
    manifest = Manifest.model_validate({"roster": [{"id": "lead", "kind": "orchestrator", "agent": "oracle"}]})
    with pytest.raises(InputError) as refused:
        preflight(load_tasks(tmp_path / "ds"), manifest)
    (problem,) = [p for p in refused.value.problems if "verifier.env" in p]
    assert problem.startswith(f"{task}/task.toml: field 'verifier.env.J'") and "5 characters" in problem
    assert "abc12" not in problem


def test_a_step_s_verifier_env_is_checked_at_preflight_too(tmp_path, monkeypatch):
    from orchestrator.tasks import compose, load_tasks
    task = tmp_path / "ds/stepped"
    for folder in ("environment", "tests", "solution", "steps/one", "steps/two"):
        (task / folder).mkdir(parents=True)
    (task / "task.toml").write_text('[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n'
                                    '[steps.verifier]\nenv = {J = "${JUDGE_KEY}"}\n')
    for path in ("instruction.md", "steps/one/instruction.md", "steps/two/instruction.md"):
        (task / path).write_text("x\n")
    (task / "environment/Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (task / "tests/test.sh").write_text("#!/bin/bash\n")
    (task / "solution/solve.sh").write_text("#!/bin/bash\n")
    (tasks,) = load_tasks(tmp_path / "ds")
    assert tasks.config.steps is not None and tasks.config.steps[1].verifier.env == {"J": "${JUDGE_KEY}"}
    monkeypatch.setattr(compose, "_allowed_host_env", frozenset({"JUDGE_KEY"}))
    manifest = Manifest.model_validate({"roster": [{"id": "lead", "kind": "orchestrator", "agent": "nop"}]})
    monkeypatch.delenv("JUDGE_KEY", raising=False)
    with pytest.raises(InputError, match=r"stepped/task.toml: field 'steps\[1\].verifier.env.J'.*not set"):
        preflight([tasks], manifest)
    monkeypatch.setenv("JUDGE_KEY", "abc12")
    with pytest.raises(InputError, match=r"stepped/task.toml: field 'verifier.env.J'.*5 characters"):
        preflight([tasks], manifest)
    monkeypatch.setenv("JUDGE_KEY", SHORT)
    assert preflight([tasks], manifest) == set()
