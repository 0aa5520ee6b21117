"""task.toml validation without Docker."""

from __future__ import annotations

import pytest
from conftest import ROOT, make_task

from orchestrator.errors import InputError
from orchestrator.models.task import size_to_mb
from orchestrator.tasks.load import (
    find_task_dirs,
    hash_tree,
    image_repository,
    load_task,
    load_tasks,
)


def test_shipped_examples_are_valid():
    tasks = load_tasks(ROOT / "tasks" / "examples")
    assert {t.name for t in tasks} >= {"examples/hello-file", "examples/artifact-report",
                                       "examples/multi-metric"}


def test_harbor_fields_are_accepted_and_mapped(tmp_path):
    task = load_task(make_task(tmp_path, "h", toml="""
        version = "1.0"
        source = "terminal-bench"
        [metadata]
        author_name = "someone"
        anything_goes = 3
        [agent]
        timeout_sec = 12
        user = "agent"
        [solution]
        env = { A = "1" }
        [environment]
        memory = "2G"
        storage = "512M"
        allow_internet = false
    """))
    env = task.config.environment
    assert (env.memory_mb, env.storage_mb, env.network_mode) == (2048, 512, "no-network")
    assert task.config.verifier.environment_mode == "shared"  # Harbor's default
    assert task.config.agent.user == "agent"


@pytest.mark.parametrize("toml, field", [
    ("[environment]\ncpus = 'two'\n", "environment.cpus"),
    ("[environment]\ngpus = 2\n", "environment"),
    ("steps = [{a = 1}]\n", "steps"),
    ("[verifier]\nenvironment_mode = 'both'\n", "verifier.environment_mode"),
    ("artifacts = ['relative/path']\n", "artifacts"),
    ("[environment]\nworkdir = 'app'\n", "environment.workdir"),
    ("[agent]\ntimeout_sec = 'soon'\n", "agent.timeout_sec"),
])
def test_bad_fields_are_named(tmp_path, toml, field):
    path = make_task(tmp_path, "bad", toml=toml)
    with pytest.raises(InputError) as info:
        load_task(path)
    message = str(info.value)
    assert str(path / "task.toml") in message
    assert field in message


def test_not_toml_and_missing_files_are_all_listed(tmp_path):
    path = make_task(tmp_path, "broken")
    (path / "task.toml").write_text("[agent\n")
    (path / "instruction.md").unlink()
    with pytest.raises(InputError) as info:
        load_task(path)
    assert len(info.value.problems) == 2
    assert "not valid TOML" in str(info.value) and "instruction.md" in str(info.value)


def test_content_hash_changes_with_content_only(tmp_path):
    path = make_task(tmp_path, "x")
    first = hash_tree(path)
    assert hash_tree(path) == first
    (path / "instruction.md").write_text("changed")
    assert hash_tree(path) != first


def test_sizes_and_image_names():
    assert size_to_mb("2G") == 2048 and size_to_mb("512M") == 512 and size_to_mb("1gi") == 1024
    with pytest.raises(ValueError):
        size_to_mb("lots")


def test_image_repository_is_a_valid_reference(tmp_path):
    task = load_task(make_task(tmp_path / "My Set", "Task_ONE"))
    assert image_repository(task) == "orchestra/task/my-set/task_one"


def test_finding_tasks_reports_empty_folders(tmp_path):
    with pytest.raises(InputError, match="no task.toml"):
        find_task_dirs(tmp_path)


def test_current_harbor_fields_are_accepted(tmp_path):
    """Harbor 1.x (src/harbor/models/task/config.py): nothing it defines is an unknown key."""
    task = load_task(make_task(tmp_path, "harbor", toml="""
        schema_version = "1.4"
        artifacts = ["/app/a.txt", { source = "/app/b.txt" }]
        [task]
        name = "org/harbor"
        version = "2.1"
        authors = [{ name = "Ada", email = "ada@example.com" }]
        keywords = ["k"]
        [agent]
        timeout_sec = 30
        network_mode = "no-network"
        user = 1000
        [verifier]
        network_mode = "public"
        env = { TOKEN = "${ORCH_TEST_UNSET_VAR:-fallback}" }
        [environment]
        os = "linux"
        gpus = 0
        mcp_servers = []
        network_mode = "public"
        workdir = "/srv"
        [environment.healthcheck]
        command = "test -e /srv"
        retries = 2
    """))
    c = task.config
    assert c.task.authors[0].name == "Ada" and c.task.version == "2.1"
    assert c.artifacts == ["/app/a.txt", "/app/b.txt"]
    assert c.agent.user == "1000" and c.agent.network_mode == "no-network"
    assert c.environment.healthcheck.retries == 2 and c.environment.workdir == "/srv"


def test_keys_harbor_ignores_are_accepted_and_listed(tmp_path):
    """The keys third-party datasets carry (issue 25): Harbor's models ignore what they do
    not define, so do we, and every one is listed by its dotted path."""
    task = load_task(make_task(tmp_path, "wild", toml="""
        version = "2.0"
        name = "wild"
        category = "data"
        difficulty = "hard"
        languages = ["python"]
        expert_time_estimate_hours = 1.5
        [task]
        version = "2.0"
        [metadata]
        whatever = 1
        [agent]
        timeout_sec = 30
        timeout = 3
        [environment]
        image = "python:3.12.9-slim"
        gpu_types = ["a100"]
        mcp_servers = []
        [[steps]]
        name = "one"
        dependencies = []
        inherit_prior_session = true
    """, files={"steps/one/instruction.md": "x\n"}))
    assert task.ignored_fields == [
        "name", "category", "difficulty", "languages", "expert_time_estimate_hours",
        "agent.timeout", "environment.image", "steps[0].dependencies",
        "steps[0].inherit_prior_session"]
    assert task.config.version == "2.0"  # read, not gated: a warning
    assert task.schema_warning == "schema_version '2.0' is not one Harbor defines (1.x); read as 1.x"
    assert task.config.agent.timeout_sec == 30  # what is defined still means what it says
    assert load_task(make_task(tmp_path, "plain")).ignored_fields == []


@pytest.mark.parametrize("toml, named", [
    ("[environment]\nos = 'windows'\n", "environment.os"),
    ("[environment]\nmcp_servers = [{ name = 'm', url = 'http://x' }]\n", "environment.mcp_servers"),
    ("[environment]\ntpu = { type = 'v6e', topology = '2x4' }\n", "environment.tpu"),
    ("[environment]\nskills_dir = 'skills'\n", "environment.skills_dir"),
    ("[verifier]\nnetwork_mode = 'allowlist'\nallowed_hosts = ['example.com']\n", "[verifier] network_mode = 'allowlist'"),
    ("[[verifier.collect]]\nservice = 'api'\ncommand = 'true'\n", "verifier.collect"),
    ("artifacts = [{ source = '/x', service = 'api' }]\n", "artifacts.service"),
])
def test_fields_orchestra_cannot_honour_are_named_as_such(tmp_path, toml, named):
    with pytest.raises(InputError) as info:
        load_task(make_task(tmp_path, "no", toml=toml))
    message = str(info.value)
    assert f"orchestra cannot honour `{named}" in message
    assert "unknown key" not in message


def test_allowlists_resolve_per_phase_as_harbor_does(tmp_path):
    task = load_task(make_task(tmp_path, "a", toml=(
        "[environment]\nnetwork_mode = 'allowlist'\nallowed_hosts = ['deb.debian.org', '*.pypi.org', '10.0.0.0/8']\n"
        "[verifier]\nnetwork_mode = 'public'\n")))
    c = task.config
    assert c.network_for("agent") == "allowlist" and c.network_for("verifier") == "public"
    assert c.allowed_hosts_for("agent") == ["deb.debian.org", "*.pypi.org", "10.0.0.0/8"]


@pytest.mark.parametrize("entry", ["https://example.com", "example.com:443", "ex*.com", "10.0.0.1/33", ""])
def test_allowlist_entries_are_names_addresses_or_ranges(tmp_path, entry):
    with pytest.raises(InputError) as info:
        load_task(make_task(tmp_path, "a", toml=f"[environment]\nnetwork_mode = 'allowlist'\nallowed_hosts = ['{entry}']\n"))
    assert "allowed_hosts" in str(info.value)


def test_the_egress_allowlist_matches_names_wildcards_addresses_and_ranges():
    from orchestrator.services.egress import Allowlist

    rules = Allowlist(["deb.debian.org", "*.example.com", "192.0.2.7", "10.0.0.0/8"])
    assert rules.resolve("deb.debian.org") == "deb.debian.org"
    assert rules.resolve("a.b.example.com") == "a.b.example.com" and rules.resolve("example.com") is None
    assert rules.resolve("192.0.2.7") == "192.0.2.7" and rules.resolve("192.0.2.8") is None
    assert rules.resolve("10.1.2.3") == "10.1.2.3" and rules.resolve("pypi.org.evil") is None
