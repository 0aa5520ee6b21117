"""What a dataset's files can cost the orchestrator (issue 56): every reader is bounded by
cost, not by the shapes thought of. A file past a limit is InputError (exit 2) naming the
file and the limit, refused before the parser that would pay for it; any failure to read a
task is that task's refusal, which `--skip-broken` leaves out. Each test first asserts its
attack is in place; numbers are measured with tracemalloc (this process) or getrusage."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
import tomllib
import tracemalloc
from pathlib import Path

import pytest
from conftest import make_task

from orchestrator.errors import InputError
from orchestrator.tasks.compose import Compose, Service
from orchestrator.tasks.load import load_task, load_tasks_lenient

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
NO_ENGINE = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}  # checked offline
BIG_INT = "1" * 5001  # past Python's int-to-str limit (4,300 digits)


def refused(task: Path) -> str:
    with pytest.raises(InputError) as caught:
        load_task(task)
    return "\n".join(caught.value.problems)


def peak_while(fn) -> tuple[int, object]:
    """(peak bytes traced, what fn raised or returned) while fn runs."""
    tracemalloc.start()
    try:
        try:
            out: object = fn()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out = exc
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ORCHESTRA, "tasks", "check", str(path)], capture_output=True, text=True,
                          timeout=120, env=NO_ENGINE)


# ---- TOML: dotted keys, key count, key length, number size, before tomllib ----------------


def test_a_dotted_key_is_refused_before_tomllib_pays_for_it(tmp_path):
    """tomllib is quadratic in a dotted key's parts (20,000 parts in 100 KB: 46 s, 9.8 GB).
    4,000 parts (8 KB) cost it 64 MB; refused by a linear scan first, it costs nothing."""
    key = ".".join(["a"] * 4000)
    task = make_task(tmp_path, "t", files={"task.toml": f"[agent]\ntimeout_sec = 60\n{key} = 1\n"})
    attack, _ = peak_while(lambda: tomllib.loads(f"{key} = 1\n"))
    assert attack > 32 * 1024 * 1024  # the attack in place: tomllib alone takes > 32 MB
    peak, out = peak_while(lambda: load_task(task))
    assert isinstance(out, InputError), out
    said = "\n".join(out.problems)
    assert "task.toml" in said and "dotted key" in said and "limit is 32" in said
    assert peak < 4 * 1024 * 1024, peak  # was 64 MB (tomllib's, then refused as too deep)


def test_dotted_keys_under_a_table_count_with_its_header(tmp_path):
    header = ".".join(["t"] * 20)
    key = ".".join(["k"] * 20)
    task = make_task(tmp_path, "t", files={"task.toml": f"[{header}]\n{key} = 1\n"})
    assert tomllib.loads(f"[{header}]\n{key} = 1\n")  # valid TOML, 40 deep
    said = refused(task)
    assert "task.toml" in said and "nested more than 32" in said and "line 2" in said


def test_too_many_keys_are_refused_by_count(tmp_path):
    body = "".join(f"k{i} = {i}\n" for i in range(20_001))
    task = make_task(tmp_path, "t", files={"task.toml": "[metadata]\n" + body})
    assert len(body) < 1024 * 1024  # under the size cap: the count is what refuses it
    said = refused(task)
    assert "task.toml" in said and "the limit is 20000" in said and "keys" in said


def test_too_many_values_are_refused_by_count(tmp_path):
    """8 M one-digit items fit the 16 MiB seeds cap and cost tomllib ~23 s; counted first."""
    text = "x = [" + ",".join(["1"] * 200_001) + "]\n"
    task = make_task(tmp_path, "t", files={"memory/seeds.toml": text})
    said = refused(task)
    assert "seeds.toml" in said and "the limit is 200000" in said and "values" in said


def test_a_long_key_is_refused_by_length(tmp_path):
    task = make_task(tmp_path, "t", files={"task.toml": "[metadata]\n" + "k" * 5000 + " = 1\n"})
    said = refused(task)
    assert "task.toml" in said and "the limit is 1024" in said


def test_ordinary_toml_still_reads(tmp_path):
    """The scan refuses costs, not TOML: arrays of tables, inline tables, dates, floats,
    strings holding brackets, dots and '=' all read as before."""
    text = ('schema_version = "1.0"\n[agent]\ntimeout_sec = 60.5\n[metadata]\n'
            'tags = ["a.b", "[x]", \'{y}\', """\nz = [\n"""]\nwhen = 1979-05-27T07:32:00Z\n'
            'nested = {a.b = {c = [1, [2, {d = 3}]]}, e = {}}\n"quoted.key".x = 1\n'
            '[[steps]]\nname = "one"\n[[steps]]\nname = "two"  # a comment [ {\n')
    task = make_task(tmp_path, "t", files={"task.toml": text})
    for step in ("one", "two"):
        make_task(task / "steps", step)
        (task / "steps" / step / "instruction.md").write_text("do it\n")
    loaded = load_task(task)
    assert loaded.config.agent.timeout_sec == 60.5 and [s.name for s in loaded.config.steps or []] == ["one", "two"]


@pytest.mark.parametrize("rel, text", [
    ("task.toml", f"[agent]\ntimeout_sec = 60\n[metadata]\nx = {BIG_INT}\n"),
    ("memory/seeds.toml", f"[[seed]]\nslug = 'a'\nvalue = 'v'\nn = {BIG_INT}\n"),
    ("environment/docker-compose.yaml", f"services:\n  db:\n    image: redis\n    healthcheck:\n"
                                        f"      test: x\n      retries: {BIG_INT}\n"),
    ("memory/project/f.md", f"---\nname: f\nmetadata: {{type: a, scope: project}}\nx: {BIG_INT}\n---\nbody\n"),
])
def test_a_5001_digit_integer_is_bad_input_naming_file_and_limit(tmp_path, rel, text):
    """Before: ValueError (Python's int-to-str limit) from the parser, exit 70."""
    make_task(tmp_path / "ds", "good")
    make_task(tmp_path / "ds", "bad", files={rel: text})
    proc = check(tmp_path / "ds")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert "Traceback" not in said and f"bad/{rel}" in said and "the limit is 100" in said
    assert "line " in said  # where, in the file


# ---- compose: services counted, dependencies walked without recursion ----------------------


def chain(n: int) -> str:
    return "services:\n" + "".join(f"  s{i}:\n    image: redis\n"
                                   + (f"    depends_on: [s{i + 1}]\n" if i < n - 1 else "")
                                   for i in range(n))


@pytest.mark.parametrize("services, limit", [(300, "300 services; the limit is 32"),
                                             (3000, "more than 20000 values; the limit is 20000")])
def test_a_chain_of_compose_services_is_refused_by_count(tmp_path, services, limit):
    """Before: RecursionError in the dependency walk at 3,000 (the audit's file), exit 70.
    Its 21,000 YAML values are past the node cap before the services are counted."""
    make_task(tmp_path / "ds", "good")
    make_task(tmp_path / "ds", "bad", files={"environment/docker-compose.yaml": chain(services)})
    proc = check(tmp_path / "ds")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in said, said
    assert "bad/environment/docker-compose.yaml" in said and limit in said


def test_the_start_order_walks_a_long_chain_without_recursion():
    services = {f"s{i}": Service(image="redis", depends_on={f"s{i + 1}": {}} if i < 2999 else {})
                for i in range(3000)}
    order = Compose(services=services).start_order()
    assert order == [f"s{i}" for i in reversed(range(3000))]
    services["s2999"] = Service(image="redis", depends_on={"s0": {}})
    with pytest.raises(ValueError, match="a cycle through s0 -> s1"):
        Compose(services=services).start_order()


# ---- Dockerfiles ---------------------------------------------------------------------------


def test_a_dockerfile_that_is_not_utf8_is_the_tasks_refusal(tmp_path):
    """Before: UnicodeDecodeError in host_needs, exit 70."""
    make_task(tmp_path / "ds", "good")
    task = make_task(tmp_path / "ds", "bad")
    (task / "environment/Dockerfile").write_bytes(b"FROM python:3.12\nRUN echo \xff\xfe\n")
    proc = check(tmp_path / "ds")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in said, said
    assert "bad/environment/Dockerfile" in said and "not UTF-8" in said


# ---- any failure to read a task is that task's refusal --------------------------------------


def test_skip_broken_leaves_out_a_task_whatever_its_reading_raised(tmp_path):
    """A fact file that is a folder raised IsADirectoryError through load_tasks_lenient:
    one task stopped the whole dataset (exit 70) where --skip-broken should leave it out."""
    make_task(tmp_path / "ds", "good")
    bad = make_task(tmp_path / "ds", "bad")
    (bad / "memory/project/notes.md").mkdir(parents=True)
    tasks, problems = load_tasks_lenient(tmp_path / "ds")
    assert [t.short_name for t in tasks] == ["good"]
    assert list(problems) == [bad.resolve()]
    assert "notes.md" in problems[bad.resolve()][0]
    proc = check(tmp_path / "ds")
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr
    assert "notes.md" in proc.stdout + proc.stderr


def test_the_audits_dotted_toml_is_refused_within_1gib(tmp_path):
    """The 100 KB file of the audit itself (20,000 dotted parts: 46 s and 9.8 GB before), run
    with 1 GiB of address space so that the code before this fix fails fast (MemoryError,
    exit 70) instead of taking the host's memory. The time is a generous hang guard."""
    key = ".".join(["a"] * 20_000)
    make_task(tmp_path / "ds", "good")
    make_task(tmp_path / "ds", "bad", files={"task.toml": f"{key} = 1\n"})
    started = time.monotonic()
    proc = subprocess.run([ORCHESTRA, "tasks", "check", str(tmp_path / "ds")], capture_output=True,
                          text=True, timeout=120, env=NO_ENGINE, preexec_fn=lambda: resource.setrlimit(
                              resource.RLIMIT_AS, (1 << 30, 1 << 30)))
    assert time.monotonic() - started < 60  # hang guard
    assert proc.returncode == 2 and "dotted key" in proc.stdout + proc.stderr


# ---- big files cost a chunk, not the file ----------------------------------------------------

MB = 1024 * 1024


def grow(path: Path, size: int, tail: bytes = b"") -> None:
    """`path` made `size` bytes (a sparse hole after what it held), then `tail`."""
    os.truncate(path, size)
    with open(path, "ab") as handle:
        handle.write(tail)


def test_a_48mib_dockerfile_is_refused_by_its_cap_before_it_is_read(tmp_path, monkeypatch):
    """A 256 MiB Dockerfile took 833 MB in `tasks check` (read whole by host_needs, twice)."""
    from orchestrator.api import check_tasks

    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE["DOCKER_HOST"])
    make_task(tmp_path / "ds", "good")
    task = make_task(tmp_path / "ds", "bad")
    grow(task / "environment/Dockerfile", 48 * MB)
    peak, out = peak_while(lambda: check_tasks(tmp_path / "ds"))
    assert isinstance(out, InputError), out
    said = "\n".join(out.problems)
    assert "bad/environment/Dockerfile" in said and "the limit is 1048576" in said
    assert peak < 8 * MB, peak  # was 48 MB and more: the file read whole


def test_a_48mib_test_script_is_scanned_a_chunk_at_a_time(tmp_path):
    """tests/*.sh were read whole to look for a fetching tool (256 MiB: 570 MB)."""
    from orchestrator.job.host_needs import host_needs

    task_dir = make_task(tmp_path, "t")
    grow(task_dir / "tests/test.sh", 48 * MB, b"\ncurl -s https://example.com\n")
    task = load_task(task_dir)
    peak, needs = peak_while(lambda: host_needs(task, None, None))
    assert isinstance(needs, list) and any("test.sh uses curl" in n for n in needs), needs
    assert peak < 8 * MB, peak  # was 48 MB and more


def test_the_doctors_defect_scan_reads_a_huge_script_in_part(tmp_path):
    from orchestrator.tasks import task_defects

    task_dir = make_task(tmp_path, "t", solve="./setup.sh\n", files={"solution/setup.sh": "true\n"})
    grow(task_dir / "solution/solve.sh", 48 * MB)
    task = load_task(task_dir)
    peak, defects = peak_while(lambda: task_defects(task))
    assert isinstance(defects, list) and any("setup.sh" in d for d in defects), defects
    assert peak < 8 * MB, peak  # was 48 MB and more: read whole, then cut to 200,000 characters


# ---- globs: bounded work whatever the pattern --------------------------------------------------


def nested(root: Path, depth: int) -> Path:
    for i in range(depth):
        root = root / f"d{i}"
        root.mkdir()
    return root


def test_repeated_globstars_in_a_copy_source_cost_one_walk(tmp_path, monkeypatch):
    """Five `**` over 40 nested folders took pathlib's glob 34 s (each `**` over every
    descendant of the one before); here the context is listed once and each path matched
    segment by segment. The folders listed are counted; the time is a generous hang guard."""
    from orchestrator.tasks import task_defects

    task_dir = make_task(tmp_path, "t", dockerfile="FROM python:3.12\nCOPY **/**/**/**/**/absent /x\n"
                                                   "COPY **/d3/**/**/d39/here.txt /y\n")
    (nested(task_dir / "environment", 40) / "here.txt").write_text("shipped\n")
    task = load_task(task_dir)
    listed = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(path) or real_scandir(path))
    started = time.monotonic()
    defects = task_defects(task)
    assert time.monotonic() - started < 10  # hang guard (was 34 s)
    assert [d for d in defects if "copies" in d] == [
        "environment/Dockerfile copies **/**/**/**/**/absent, which the task does not ship (not in "
        "environment/: the build fails 'file not found in build context')"]
    assert len(listed) < 200, len(listed)  # one walk of 41 folders per root (was hundreds of thousands)


def test_a_copy_source_glob_matches_as_before():
    from orchestrator.tasks.defects import _glob_matches

    assert _glob_matches(["**", "b", "*.txt"], ("a", "b", "c.txt"))
    assert _glob_matches(["**", "c.txt"], ("c.txt",))
    assert _glob_matches(["a", "**"], ("a", "x", "y"))
    assert not _glob_matches(["**", "b", "*.txt"], ("a", "c.txt"))
    assert not _glob_matches(["a", "*"], ("a", "b", "c"))
    assert _glob_matches(["*", "?.py"], ("src", "x.py"))


# ---- the scan refuses what tomllib's value would nest too deep, and nothing else -------------


def test_the_toml_scan_agrees_with_the_parsed_depth_on_random_documents():
    """Random TOML (headers, arrays of tables, dotted and quoted keys, inline tables, arrays,
    strings holding brackets and dots): the scan refuses a document exactly when the value
    tomllib makes of it nests deeper than 32 (checked after parsing by _too_deep)."""
    import random

    from orchestrator.tasks.inputs import _toml_cost, _too_deep

    rng, count = random.Random(5), [0]

    def key() -> str:
        count[0] += 1
        name = rng.choice(["a", "b-c", "d_1", "q.k", "e"]) + str(count[0])
        return f'"{name}"' if "." in name else rng.choice([name, f'"{name}"', f"'{name}'"])

    def dotted() -> str:
        return ".".join(key() for _ in range(rng.randint(1, 6)))

    def value(depth: int) -> str:
        if depth <= 0 or rng.random() < 0.3:
            return rng.choice(["1", "-2.5", "true", '"s[{=.,}]"', "'x'", "1979-05-27T07:32:00Z", '"""m\nl"""'])
        if rng.random() < 0.5:
            return "[" + ", ".join(value(depth - 1) for _ in range(rng.randint(0, 3))) + "]"
        return "{" + ", ".join(f"{dotted()} = {value(depth - 1)}" for _ in range(rng.randint(0, 3))) + "}"

    parsed = deep = 0
    for _ in range(3000):
        lines = [f"{dotted()} = {value(rng.randint(1, 12))}" for _ in range(rng.randint(1, 3))]
        for _ in range(rng.randint(0, 3)):
            header = dotted()
            lines.append(f"[[{header}]]" if rng.random() < 0.3 else f"[{header}]")
            lines += [f"{dotted()} = {value(rng.randint(1, 12))}  # [ {{" for _ in range(rng.randint(0, 3))]
        text = "\n".join(lines) + "\n"
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            continue
        parsed += 1
        too_deep = _too_deep(data) is not None
        deep += too_deep
        try:
            _toml_cost(Path("x.toml"), text)
            refused = False
        except InputError:
            refused = True
        assert refused == too_deep, text
    assert parsed > 2500 and deep > 300  # both kinds were tried


# ---- entries in a task folder ------------------------------------------------------------------


def test_a_task_folder_past_its_entry_cap_is_refused_before_it_is_hashed(tmp_path, monkeypatch):
    """100,000 empty files cost tasks check 9 s and 93 MB (four walks, every file opened to
    hash); a million, ten times that. The first walk counts, and stops at the cap (here
    lowered to 500 to keep the test small: the same code path)."""
    from orchestrator.tasks import inputs, load

    monkeypatch.setattr(inputs, "MAX_TASK_ENTRIES", 500)
    task = make_task(tmp_path, "t")
    data = task / "environment" / "data"
    data.mkdir()
    for i in range(600):
        (data / f"f{i}").touch()
    hashed = []
    monkeypatch.setattr(load, "hash_tree", lambda root: hashed.append(root) or "x")
    said = refused(task)
    assert str(task) in said and "more than 500 files and folders" in said and "the limit is 500" in said
    assert hashed == []  # refused before anything was hashed
    (data / "f0").unlink()
    for i in range(1, 600):
        (data / f"f{i}").unlink()
    assert load_task(task).name.endswith("/t")


def test_folders_nested_past_the_cap_are_refused_naming_it(tmp_path):
    """1,500 nested folders were a RecursionError in os.walk (now a refusal either way);
    the walk is iterative and refuses past 64, naming the folder and the limit."""
    task = make_task(tmp_path, "t")
    (nested(task / "environment", 100) / "f.txt").write_text("deep\n")
    said = refused(task)
    assert "environment/d0/d1" in said and "nested more than 64 deep" in said and "the limit is 64" in said


# ---- YAML: nodes counted ------------------------------------------------------------------------


@pytest.mark.parametrize("rel, text", [
    ("environment/docker-compose.yaml", "services:\n  main:\n    command: [" + ",".join(["x"] * 20_001) + "]\n"),
    ("memory/project/f.md", "---\nname: f\nmetadata: {type: a, scope: project}\nkeywords: ["
     + ",".join(["k"] * 20_001) + "]\n---\nbody\n"),
])
def test_a_yaml_file_of_too_many_nodes_is_refused_by_count(tmp_path, rel, text):
    """PyYAML's pure-Python parser took 8.5 s over a 585 KB flow list (300,000 items), so the
    1 MiB cap allowed ~15 s a file; nodes are counted as they are composed."""
    task = make_task(tmp_path, "t", files={rel: text})
    said = refused(task)
    assert rel.split("/")[-1] in said and "more than 20000 values" in said and "the limit is 20000" in said


@pytest.mark.parametrize("rel", ["environment/db/Dockerfile", "steps/one/tests/Dockerfile"])
def test_every_dockerfile_a_task_builds_is_checked_at_load(tmp_path, rel):
    """A sidecar's build Dockerfile and a step's tests/Dockerfile were read whole at build
    time (read_text: no cap, not UTF-8 an uncaught error mid-trial); now at load, as the
    task's own."""
    toml = '[[steps]]\nname = "one"\n' if rel.startswith("steps") else "[agent]\ntimeout_sec = 60\n"
    files = {"environment/docker-compose.yaml": "services:\n  db:\n    build: db\n",
             "environment/db/Dockerfile": "FROM redis:7\n",
             "steps/one/instruction.md": "do it\n"}
    task = make_task(tmp_path, "t", toml=toml, files=files)
    path = task / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"FROM python:3.12\nRUN echo \xff\n")
    said = refused(task)
    assert rel in said and "not UTF-8" in said


def test_the_doctors_reason_scans_a_huge_test_script_in_chunks(tmp_path):
    """The doctor read every test.sh whole to say it fetches at grading time."""
    import json

    from orchestrator.job.doctor import _why_oracle_failed
    from orchestrator.models.result import TrialResult

    task_dir = make_task(tmp_path, "t", toml='[verifier]\nnetwork_mode = "no-network"\n')
    grow(task_dir / "tests/test.sh", 48 * MB, b"\ncurl -s https://example.com\n")
    task = load_task(task_dir)
    assert task.config.network_for("verifier") == "no-network"
    raw = json.loads((Path(__file__).parent / "data/results/trial-relay.json").read_text())
    oracle = TrialResult.model_validate({**raw, "reward": {"reward": 0.0}, "failure_mode": "none", "error": None})
    peak, why = peak_while(lambda: _why_oracle_failed(oracle, tmp_path / "no-job", task))
    assert isinstance(why, str) and "test.sh fetches (curl)" in why, why
    assert peak < 8 * MB, peak  # was 48 MB and more: read whole


# ---- memory fact files: counted and summed (each is held for the trial's seed archive) --------

FACT = "---\nname: f\nmetadata: {type: a, scope: project}\n---\n"


def test_too_many_fact_files_are_refused_by_count(tmp_path):
    task = make_task(tmp_path, "t", files={f"memory/project/f{i}.md": FACT + "body\n" for i in range(1001)})
    said = refused(task)
    assert "memory" in said and "1001 fact files" in said and "the limit is 1000" in said


def test_fact_files_past_16mib_in_all_are_refused_before_they_are_read(tmp_path):
    """Each fact file is capped at 1 MiB, but all were read and held (100,000 of them
    would be 100 GB): their sizes are summed first."""
    files = {f"memory/global/f{i}.md": FACT + "x" * (1024 * 1024 - 100) + "\n" for i in range(17)}
    task = make_task(tmp_path, "t", files=files)
    peak, out = peak_while(lambda: load_task(task))
    assert isinstance(out, InputError), out
    said = "\n".join(out.problems)
    assert "fact files" in said and "the limit is 16777216" in said
    assert peak < 4 * MB, peak  # refused by their sizes, none read
