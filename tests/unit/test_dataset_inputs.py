"""A task folder from the internet is an attacker (DESIGN 4): links out of it are refused,
its YAML and TOML cannot expand or recurse without limit, its big files are streamed, its
names are never paths, its values are bounded. Every refusal is InputError (exit 2) naming
the file, and the field where there is one. Each test first asserts its attack is in place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_task

from orchestrator.errors import InputError
from orchestrator.tasks.load import load_task, load_tasks_lenient

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


def refused(task: Path) -> str:
    with pytest.raises(InputError) as caught:
        load_task(task)
    return "\n".join(caught.value.problems)


# ---- 1. links out of the folder ------------------------------------------------------------


@pytest.mark.parametrize("rel, target", [
    ("instruction.md", "/proc/self/environ"),
    ("task.toml", "/etc/hostname"),
    ("solution/secrets", "/root"),
    ("solution/solve.sh", "../../../../../../etc/passwd"),
    ("environment/data.txt", "/dev/zero"),
    ("tests/helper.py", "../../outside.py"),
    ("memory/project/fact.md", "/etc/passwd"),
    ("steps/one/tests", "/etc"),
])
def test_a_link_out_of_the_task_folder_is_the_tasks_defect(tmp_path, rel, target):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "outside.py").write_text("print('host file')\n")
    task = make_task(tmp_path / "ds", "t")
    link = task / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(target)
    # the attack is in place: a link whose target resolves outside the task folder
    resolved = (link.parent / os.readlink(link)).resolve()
    assert link.is_symlink() and not str(resolved).startswith(str(task.resolve()) + "/")
    said = refused(task)
    assert str(link) in said and target in said and "links out" in said


def test_a_link_to_proc_never_reaches_the_instruction(tmp_path):
    env = {**os.environ, "ORCHESTRA_TEST_SECRET": "sk-do-not-leak"}
    task = make_task(tmp_path, "t")
    (task / "instruction.md").unlink()
    (task / "instruction.md").symlink_to("/proc/self/environ")
    # the attack is in place: read through the link, a process's environment is the instruction
    assert b"sk-do-not-leak" in subprocess.run(["cat", str(task / "instruction.md")], env=env,
                                               capture_output=True).stdout
    proc = subprocess.run([ORCHESTRA, "tasks", "check", str(task)], env=env,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "instruction.md" in out and "/proc/self/environ" in out
    assert "sk-do-not-leak" not in out


def test_links_that_stay_inside_are_kept(tmp_path):
    task = make_task(tmp_path, "t", files={"environment/data/real.txt": "x\n"})
    (task / "environment/alias.txt").symlink_to("data/real.txt")
    (task / "solution/same.sh").symlink_to("solve.sh")
    assert (task / "environment/alias.txt").resolve().is_relative_to(task)
    assert load_task(task).name.endswith("/t")


def test_a_link_loop_is_refused_not_followed(tmp_path):
    task = make_task(tmp_path, "t")
    (task / "environment/a").symlink_to("b")
    (task / "environment/b").symlink_to("a")
    assert "loop" in refused(task)


def test_a_dataset_with_a_link_out_keeps_its_bystanders(tmp_path):
    make_task(tmp_path, "good")
    bad = make_task(tmp_path, "bad")
    (bad / "instruction.md").unlink()
    (bad / "instruction.md").symlink_to("/proc/self/environ")
    tasks, problems = load_tasks_lenient(tmp_path)
    assert [t.short_name for t in tasks] == ["good"] and list(problems) == [bad]


# ---- 2. parsers that cannot recurse or expand without limit --------------------------------

LAUGHS = "\n".join(
    ["a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)]
    + ["services:\n  main:\n    environment:\n      X: *i"])


def test_yaml_aliases_are_refused_before_they_expand(tmp_path):
    task = make_task(tmp_path, "t", files={"environment/docker-compose.yaml": LAUGHS})
    text = (task / "environment/docker-compose.yaml").read_text()
    assert len(text) < 600 and text.count("*") >= 70  # the attack: 9^9 strings from 0.5 kB
    said = refused(task)
    assert "docker-compose.yaml" in said and "alias" in said


def test_a_volume_name_that_could_leave_the_trials_disk_is_refused(tmp_path):
    compose = "services:\n  main:\n    volumes:\n      - ../../x:/data\nvolumes:\n  ../../x:\n"
    said = refused(make_task(tmp_path, "t", files={"environment/docker-compose.yaml": compose}))
    assert "docker-compose.yaml" in said and "volumes.../../x" in said


def test_deep_yaml_is_a_problem_not_a_recursion_error(tmp_path):
    deep = "services: " + "[" * 100_000 + "]" * 100_000 + "\n"
    task = make_task(tmp_path, "t", files={"environment/docker-compose.yaml": deep})
    said = refused(task)
    assert "docker-compose.yaml" in said and "deep" in said


def test_deep_frontmatter_is_a_problem(tmp_path):
    fact = "---\nname: " + "[" * 50_000 + "]" * 50_000 + "\n---\nbody\n"
    task = make_task(tmp_path, "t", files={"memory/project/f.md": fact})
    assert "f.md" in refused(task)


@pytest.mark.parametrize("rel", ["task.toml", "memory/seeds.toml"])
def test_deep_toml_is_a_problem_not_a_recursion_error(tmp_path, rel):
    task = make_task(tmp_path, "t", files={rel: "x = " + "[" * 100_000 + "]" * 100_000 + "\n"})
    said = refused(task)
    assert rel.split("/")[-1] in said and "nested" in said


def test_deep_dotted_toml_keys_are_a_problem(tmp_path):
    task = make_task(tmp_path, "t", toml="[metadata]\n" + ".".join(["k"] * 200) + " = 1\n")
    said = refused(task)
    assert "task.toml" in said and "field 'metadata.k.k" in said


def test_brackets_in_toml_strings_do_not_count(tmp_path):
    task = make_task(tmp_path, "t", toml='[task]\ndescription = "' + "[" * 100 + '"\n')
    assert load_task(task).config.task.description == "[" * 100


@pytest.mark.parametrize("rel, size", [("task.toml", 2 * 1024 * 1024),
                                       ("environment/docker-compose.yaml", 2 * 1024 * 1024),
                                       ("instruction.md", 2 * 1024 * 1024)])
def test_oversized_task_files_are_refused_by_size(tmp_path, rel, size):
    task = make_task(tmp_path, "t", files={rel: "# " + "x" * size + "\n"})
    said = refused(task)
    assert rel.split("/")[-1] in said and "limit" in said


def test_deep_toml_leaves_skip_broken_its_bystander(tmp_path):
    """Before: a RecursionError traceback (exit 1) that --skip-broken could not leave out."""
    make_task(tmp_path / "ds", "good")
    make_task(tmp_path / "ds", "deep", files={"task.toml": "x = " + "[" * 100_000 + "]" * 100_000})
    proc = subprocess.run([ORCHESTRA, "tasks", "check", str(tmp_path / "ds")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    assert "deep/task.toml" in proc.stdout + proc.stderr


# ---- 3. huge files are streamed -------------------------------------------------------------

RSS = """
import resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def peak_rss(command: list[str]) -> tuple[int, int]:
    """(exit code, peak RSS in bytes) of `command` run in a fresh process."""
    out = subprocess.run([sys.executable, "-c", RSS, *command], capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    return int(out[0]), int(out[1])


def test_a_1gib_data_file_costs_tasks_check_no_1gib(tmp_path):
    task = make_task(tmp_path / "ds", "big")
    baseline = peak_rss([ORCHESTRA, "tasks", "check", str(tmp_path / "ds")])
    subprocess.run(["truncate", "-s", "1G", str(task / "environment/data.bin")], check=True)
    assert (task / "environment/data.bin").stat().st_size == 1 << 30  # the attack: 1 GiB to hash
    code, peak = peak_rss([ORCHESTRA, "tasks", "check", str(tmp_path / "ds")])
    assert baseline[0] == code == 0
    assert peak - baseline[1] < 200 * 1024 * 1024, (baseline[1], peak)  # was +1,016 MB


CONTEXT = """
import resource, sys, tarfile
from pathlib import Path
from orchestrator.trial.bases import build_context
from orchestrator.tasks.standins import StandIn
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
folder = Path(sys.argv[1])
with build_context(folder, (folder / "Dockerfile").read_text(), [], b"CA") as context:
    with tarfile.open(fileobj=context, mode="r|") as tar:
        names = {m.name: m.size for m in tar}
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(after - before, names["./data.bin"], names["Dockerfile"], "./Dockerfile" in names)
"""


def test_a_build_context_is_streamed_from_a_file(tmp_path):
    task = make_task(tmp_path, "big")
    subprocess.run(["truncate", "-s", "512M", str(task / "environment/data.bin")], check=True)
    out = subprocess.run([sys.executable, "-c", CONTEXT, str(task / "environment")],
                         capture_output=True, text=True, timeout=300, check=True).stdout.split()
    growth, size, dockerfile = int(out[0]), int(out[1]), int(out[2])
    assert size == 512 << 20  # the whole file went into the context
    assert dockerfile > len("FROM python:3.12-slim-bookworm\nWORKDIR /app\n")  # trust lines added
    assert out[3] == "False"  # the task's own Dockerfile replaced, not doubled
    assert growth < 100 * 1024 * 1024, growth  # bytes in memory were 2-3x the file


# ---- 4. names are never paths, and never forge a report row ---------------------------------


@pytest.mark.parametrize("name, fragment", [
    ("ds/" + "n" * 300, "the limit is 200"),
    ("ds/nul\\u0000name", "control character"),
    ("ds/forged\\n| ds/other | 1 | 1.000 | 1/1 |", "control character"),
    ("ds/..", "'..'"),
])
def test_a_task_name_that_cannot_name_a_folder_is_refused_by_field(tmp_path, name, fragment):
    task = make_task(tmp_path / "ds", "t", toml=f'[task]\nname = "{name}"\n')
    said = refused(task)
    assert "task.toml" in said and "task.name" in said and fragment in said


def test_a_folder_name_with_a_line_break_is_refused_not_reported(tmp_path):
    task = make_task(tmp_path / "ds", "t\n| ds-forged | 1 | 1.000 | 1-1 |")
    assert "\n" in task.name  # the attack: the folder's name becomes the task's
    assert "control character" in refused(task)


def test_a_long_name_leaves_its_bystanders(tmp_path):
    make_task(tmp_path, "good")
    make_task(tmp_path, "long", toml=f'[task]\nname = "ds/{"n" * 300}"\n')
    tasks, problems = load_tasks_lenient(tmp_path)
    assert [t.short_name for t in tasks] == ["good"] and len(problems) == 1


def test_report_md_escapes_pipes_and_line_breaks_in_cells():
    from orchestrator.models.result import FailureMode, JobResult, TrialResult
    from orchestrator.report.render import to_markdown
    from orchestrator.report.tables import tables

    forged = "ds/x | 9 | 1.000 | 9/9 |\n| ds/forged"
    trial = TrialResult(trial_id="a" * 64, job="j", task=forged, task_path="/t", content_hash="h",
                        condition="c", condition_hash="h", agent="a\n# heading", attempt=0,
                        failure_mode=FailureMode.NONE, reward={"reward": 0.0},
                        started_at=0.0, finished_at=1.0)
    job = JobResult(job="j", condition="c", condition_hash="h", agent="a\n# heading", policy="p",
                    k=1, n_trials=1)
    text = to_markdown(job, tables([trial]))
    rows = [line for line in text.splitlines() if "forged" in line]
    assert len(rows) == 1 and rows[0].count(" | ") == 3  # one row of 4 cells: nothing forged
    assert "\\|" in rows[0] and "\\x0a" in rows[0]
    assert "# heading" not in text.split("\n## ")[0].splitlines()[1:]


# ---- 5. unusable values are bounded when loaded --------------------------------------------


@pytest.mark.parametrize("toml, field", [
    ("[agent]\ntimeout_sec = inf\n", "agent.timeout_sec"),
    ("[verifier]\ntimeout_sec = nan\n", "verifier.timeout_sec"),
    ("[agent]\ntimeout_sec = 1e9\n", "agent.timeout_sec"),
    ("[environment]\nbuild_timeout_sec = inf\n", "environment.build_timeout_sec"),
    ('[environment]\nmemory = "0M"\n', "environment.memory"),
    ('[environment]\nmemory = "1e400G"\n', "environment"),
    ("[environment]\ncpus = 0.0001\n", "environment.cpus"),
    ("[environment]\ncpus = inf\n", "environment.cpus"),
    ('[environment]\nstorage = "1K"\n', "environment.storage"),
    ('[environment]\nworkdir = "/logs"\n', "environment.workdir"),
    ('[environment]\nworkdir = "/logs/agent"\n', "environment.workdir"),
    ('[environment]\nworkdir = "/app/../tests"\n', "environment.workdir"),
    ('[environment]\nworkdir = "/opt/orchestra"\n', "environment.workdir"),
    ('[environment]\nworkdir = "/solution"\n', "environment.workdir"),
    ('[environment.healthcheck]\ncommand = "true"\nstart_period_sec = 1e9\n', "environment.healthcheck.start_period_sec"),
    ('[environment.healthcheck]\ncommand = "true"\ninterval_sec = inf\n', "environment.healthcheck.interval_sec"),
    ('[environment.healthcheck]\ncommand = "true"\ntimeout_sec = 1e6\n', "environment.healthcheck.timeout_sec"),
    ('[environment.healthcheck]\ncommand = "true"\nretries = 1000000\n', "environment.healthcheck.retries"),
    ('[verifier.environment]\nmemory = "0M"\n', "verifier"),
])
def test_an_unusable_value_is_refused_at_load_naming_the_field(tmp_path, toml, field):
    task = make_task(tmp_path, "t", toml=toml)
    said = refused(task)
    assert "task.toml" in said and f"field '{field}" in said, said


@pytest.mark.parametrize("toml", [
    '[agent]\ntimeout_sec = 604800\n[environment]\ncpus = 0.01\nmemory = "16M"\nstorage = "16M"\n',
    '[environment]\nworkdir = "/logsheet"\n[environment.healthcheck]\ncommand = "true"\nstart_period_sec = 3600\n',
])
def test_values_at_the_bounds_still_load(tmp_path, toml):
    assert load_task(make_task(tmp_path, "t", toml=toml))


@pytest.mark.parametrize("healthcheck, field", [
    ("start_period: 1000000000s", "start_period"),
    ("interval: 2h", "interval"),
    ("timeout: 99999999999999999999999999999999999999h", "timeout"),
    ("retries: 100000", "retries"),
])
def test_a_sidecar_healthcheck_that_waits_forever_is_refused(tmp_path, healthcheck, field):
    compose = ("services:\n  db:\n    image: redis:7\n    healthcheck:\n"
               f"      test: [\"CMD\", \"true\"]\n      {healthcheck}\n")
    task = make_task(tmp_path, "t", files={"environment/docker-compose.yaml": compose})
    said = refused(task)
    assert "docker-compose.yaml" in said and f"services.db.healthcheck.{field}" in said, said


# ---- 6. a sidecar's build context stays inside the task folder -----------------------------


@pytest.mark.parametrize("build, field", [
    ("build: /", "context"),
    ("build: ../../..", "context"),
    ("build:\n      context: /etc", "context"),
    ("build:\n      context: ../..", "context"),
    ("build:\n      context: .\n      dockerfile: ../../../etc/Dockerfile", "dockerfile"),
])
def test_a_sidecar_build_context_outside_the_task_is_refused(tmp_path, build, field):
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")  # something to build up there
    compose = f"services:\n  db:\n    {build}\n"
    task = make_task(tmp_path / "ds", "t", files={"environment/docker-compose.yaml": compose})
    said = refused(task)
    assert "docker-compose.yaml" in said and f"services.db.build.{field}" in said, said
    assert "leaves the task folder" in said


def test_a_sidecar_build_context_inside_the_task_loads(tmp_path):
    compose = "services:\n  db:\n    build: ../sidecar\n  web:\n    build: db\n"
    task = make_task(tmp_path, "t", files={"environment/docker-compose.yaml": compose,
                                           "sidecar/Dockerfile": "FROM scratch\n",
                                           "environment/db/Dockerfile": "FROM scratch\n"})
    assert set(load_task(task).compose.sidecars) == {"db", "web"}
