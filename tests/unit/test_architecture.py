"""The seams hold: docker-py (and requests, urllib3 under it) only in the engine client,
the engine client only behind the Docker runtime, imports flow down the layers of DESIGN 1
(any import, lazy ones too), no package imports another's private names, and no import
cycles between orchestra's modules (module-level imports)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "orchestrator"
ENGINE_CLIENTS = {"docker", "requests", "urllib3"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def lazy_map(path: Path) -> dict[str, str]:
    """A face's `public_face(__name__, {name: module})` map, as name -> module relative to
    the package ({} for an __init__ that is not a lazy face)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and getattr(node.value.func, "id", None) == "public_face":
            mapping = node.value.args[1]
            assert isinstance(mapping, ast.Dict)
            return {ast.literal_eval(k): ast.literal_eval(v)
                    for k, v in zip(mapping.keys, mapping.values, strict=True) if k is not None}
    return {}


def through_face(module: str, name: str) -> str | None:
    """The module a face's lazy name loads (a face of a face followed), or None when
    `module` is not a face or does not load `name` lazily."""
    init = ROOT / Path(*module.split(".")) / "__init__.py"
    target = lazy_map(init).get(name) if init.is_file() else None
    if target is None:
        return None
    return through_face(f"{module}.{target}", name) or f"{module}.{target}"


def top_level_imports(path: Path) -> set[str]:
    """Modules imported at module level (not under `if TYPE_CHECKING:`, not in functions); a
    name imported from a lazy face counts as an import of the module the face loads it from."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
            found |= {m for alias in node.names if (m := through_face(node.module, alias.name))}
    return found


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported_anywhere(path: Path) -> set[str]:
    """Every module an orchestra file imports (module level, functions, TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def in_the_docker_runtime(module: str) -> bool:
    """The Docker runtime is a package: its __init__ and the modules of its parts."""
    return module == "orchestrator.runtime.docker" or module.startswith("orchestrator.runtime.docker.")


DOCKER_RUNTIME = sorted(name for name in MODULES if in_the_docker_runtime(name))


def test_docker_py_only_in_the_engine_client_and_that_only_behind_the_docker_runtime():
    third_party = sorted(name for name, path in MODULES.items()
                         if {m.split(".")[0] for m in imported_anywhere(path)} & ENGINE_CLIENTS)
    assert third_party == ["orchestrator.runtime.client"]
    engine_users = sorted(name for name, path in MODULES.items()
                          if "orchestrator.runtime.client" in imported_anywhere(path))
    assert "orchestrator.runtime.docker" in engine_users
    assert [name for name in engine_users if not in_the_docker_runtime(name)] == []


def test_no_import_cycles_between_orchestra_modules():
    graph = {name: {m for m in top_level_imports(path) if m in MODULES and m != name}
             for name, path in MODULES.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_checks_see_what_they_check():
    assert "orchestrator.runtime.docker" in MODULES and "orchestrator.job.runner" in MODULES
    assert "orchestrator.runtime.docker.containers" in DOCKER_RUNTIME
    assert not in_the_docker_runtime("orchestrator.runtime.dockerish")
    assert "orchestrator.runtime.client" in top_level_imports(MODULES["orchestrator.runtime.docker"])
    assert "docker" in imported_anywhere(MODULES["orchestrator.runtime.client"])
    assert "orchestrator.trial.context" in top_level_imports(MODULES["orchestrator.job.runner"])
    assert through_face("orchestrator.services", "start_relay") == "orchestrator.services.relay.session"
    assert through_face("orchestrator.trial", "no_such_name") is None


# Keys of the Engine API's JSON (inspect, info, images): read only inside the runtime, which
# hands out typed facts (EngineFacts, ImageFacts, ContainerLimits, HealthProbe) instead.
ENGINE_KEYS = {"HostConfig", "NanoCpus", "MemorySwap", "PidsLimit", "CapDrop", "CapAdd",
               "SecurityOpt", "NetworkMode", "LogConfig", "RepoTags", "RepoDigests", "NCPU",
               "MemTotal", "Runtimes", "ServerVersion", "Config", "State", "NetworkSettings",
               "Healthcheck", "StartPeriod", "SizeRw", "ExitCode", "OOMKilled", "IPAM",
               "Gateway", "Subnet", "Containers", "WorkingDir", "Env", "Labels"}


def engine_json_reads(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant)):
            key = node.args[0].value
        if isinstance(key, str) and key in ENGINE_KEYS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {key}")
    return found


def test_no_module_outside_the_runtime_reads_engine_json():
    outside = [p for name, p in MODULES.items() if not name.startswith("orchestrator.runtime")]
    assert [hit for p in outside for hit in engine_json_reads(p)] == []
    # the check sees what it checks: the Docker runtime's parts themselves read them
    for part in ("shared", "engine", "images", "networks", "containers", "execs"):
        assert engine_json_reads(MODULES[f"orchestrator.runtime.docker.{part}"]), part


def test_host_side_enforcement_is_reached_only_through_the_runtime():
    """Loop disks and the firewall act on this host: only the runtime knows whether its
    engine shares the host, so no phase imports them itself."""
    host_side = {"orchestrator.runtime.disk", "orchestrator.runtime.firewall"}
    users = sorted(name for name, path in MODULES.items()
                   if not name.startswith("orchestrator.runtime")
                   and (imported_anywhere(path) | top_level_imports(path)) & host_side)
    assert users == []
    assert "orchestrator.runtime.disk" in top_level_imports(MODULES["orchestrator.runtime.docker"])


# DESIGN 1, top to bottom: a module may import its own layer and the layers below it.
# api/ (the Python API the CLI calls: runs, admin, results) is a layer of its own, under cli.
LAYERS = ["cli", "api", "view", "report", "job", "executors", "trial", "agents", "services", "host",
          "runtime", "tasks", "models", "kernel"]
KERNEL = {"archive", "errors", "log", "paths", "scrub", "util"}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:  # orchestrator itself (its public_face helper): the kernel
        return "kernel"
    return "kernel" if parts[1] in KERNEL else parts[1]


def imports_by_line(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every orchestra import in the file, lazy ones too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names
                      if alias.name.startswith("orchestrator")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("orchestrator"):
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
    return found


def upward_imports(modules: dict[str, Path]) -> list[str]:
    found = []
    for name, path in sorted(modules.items()):
        mine = LAYERS.index(layer_of(name))
        for line, module, _ in imports_by_line(path):
            theirs = layer_of(module)
            if theirs in LAYERS and LAYERS.index(theirs) < mine:
                found.append(f"{path.name}:{line}: {layer_of(name)} imports {module} ({theirs})")
    return found


def test_imports_flow_down_the_layers():
    assert sorted(layer_of(m) for m in MODULES if m.count(".") == 1 and layer_of(m) != "kernel") == \
        sorted(set(LAYERS) - {"kernel"}), "every package of orchestrator/ has a layer"
    assert upward_imports(MODULES) == []


def test_the_layer_check_fails_on_a_planted_upward_import(tmp_path):
    planted = tmp_path / "orchestrator" / "runtime" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("def f():\n    from orchestrator.trial.lifecycle import run_trial\n")
    found = upward_imports({**MODULES, "orchestrator.runtime.planted": planted})
    assert len(found) == 1 and "runtime imports orchestrator.trial.lifecycle (trial)" in found[0]


def test_the_kernel_is_at_most_six_modules_and_nothing_else_is_flat():
    flat = sorted(p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert flat == sorted(KERNEL) and len(flat) <= 6


# cli/ holds no job logic (issue 47): it parses, calls one function of the API and renders.
# So its modules import only the API's face, the renderers (report), the models, the kernel
# and cli/ itself: never a layer that makes a job or looks after the host.
CLI_MAY_IMPORT = ("orchestrator.api", "orchestrator.report", "orchestrator.models", "orchestrator.cli")


def cli_reaches(modules: dict[str, Path]) -> list[str]:
    """Imports of cli/ modules (module level, in functions, under TYPE_CHECKING) outside
    what the CLI may import; the API only through its face (orchestrator.api)."""
    found = []
    for name, path in sorted(modules.items()):
        if layer_of(name) != "cli":
            continue
        for line, module, _ in imports_by_line(path):
            allowed = layer_of(module) == "kernel" or module == "orchestrator.api" or any(
                module == top or module.startswith(top + ".") for top in CLI_MAY_IMPORT[1:])
            if not allowed:
                found.append(f"{path.name}:{line}: {module}")
    return found


def test_the_cli_imports_only_the_api_the_renderers_the_models_and_the_kernel():
    assert cli_reaches(MODULES) == []
    cli = {name for name in MODULES if layer_of(name) == "cli"}
    assert {"orchestrator.cli.admin", "orchestrator.cli.commands", "orchestrator.cli.run"} <= cli
    reached = {module for name in cli for _, module, _ in imports_by_line(MODULES[name])}
    assert "orchestrator.api" in reached  # the check sees the imports it allows, too


def test_the_cli_check_fails_on_a_planted_reach_past_the_api(tmp_path):
    planted = tmp_path / "orchestrator" / "cli" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("from orchestrator.api import run\nfrom orchestrator.report import render_job\n"
                       "from orchestrator.errors import InputError\n"
                       "def f():\n    from orchestrator.runtime import open_runtime\n"
                       "    from orchestrator.api.runs import _check\n"
                       "    from orchestrator.host import reap\n")
    found = cli_reaches({"orchestrator.cli.planted": planted})
    assert [hit.split(": ", 1)[1] for hit in found] == [
        "orchestrator.runtime", "orchestrator.api.runs", "orchestrator.host"]


def test_no_package_imports_another_packages_private_names():
    found = []
    for name, path in sorted(MODULES.items()):
        for line, module, names in imports_by_line(path):
            other = module.split(".")[:2] != name.split(".")[:2]
            private = [n for n in names if n.startswith("_")] + \
                [part for part in module.split(".") if part.startswith("_")]
            if other and private:
                found.append(f"{path.relative_to(ROOT)}:{line}: {module} {private}")
    assert found == []


# Code outside a package imports the package's face (its __init__: `from orchestrator.trial
# import run_trial`), never a module inside it, so a package can move its insides freely and
# mypy sees each name's type through the face (tests/unit/test_faces.py). The exceptions, each
# with its reason; a key is a module (every name from it) or "module:name" (that name only).
FACE_EXCEPTIONS = {
    "orchestrator.models.atif": "Harbor's ATIF schema: its names (Agent, Step, Trajectory, Metrics) "
                                "would read as orchestra's own through the models face",
    "orchestrator.models.trajectory": "plain functions read as trajectory.records(...); records is also "
                                      "the name of the models.records module",
    "orchestrator.report.gate:gate": "named like its module: once report.gate is loaded, the package's "
                                     "attribute `gate` is the module",
    "orchestrator.report.compare:compare": "named like its module (report.compare)",
    "orchestrator.report.compare:to_markdown": "report.render has a to_markdown too",
    "orchestrator.report.render:to_markdown": "report.compare has a to_markdown too",
    "orchestrator.report.tables:tables": "named like its module (report.tables)",
    "orchestrator.report.templating:render": "named like a module (report.render)",
    "orchestrator.job.host_needs:host_needs": "named like its module (job.host_needs)",
}


def package_of(module: str) -> str | None:
    """orchestrator.X for a module of package X; None for the kernel and the root."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] in KERNEL:
        return None
    return ".".join(parts[:2])


def faceless_imports(modules: dict[str, Path]) -> tuple[list[str], set[str]]:
    """Cross-package imports that reach into a module (or name a submodule through the
    package), and the exceptions that were used."""
    found, used = [], set()
    for name, path in sorted(modules.items()):
        mine = package_of(name)
        for line, module, names in imports_by_line(path):
            theirs = package_of(module)
            if theirs is None or theirs == mine:
                continue
            init = ROOT / Path(*theirs.split(".")) / "__init__.py"
            submodules = {p.stem for p in init.parent.glob("*.py")} | \
                {p.parent.name for p in init.parent.glob("*/__init__.py")}
            reached = [(module, n) for n in names] if module != theirs else \
                [(f"{theirs}.{n}", "") for n in names if n in submodules]
            if not names and module != theirs:  # import orchestrator.x.y
                reached = [(module, "")]
            for target, what in reached:
                key = next((k for k in (f"{target}:{what}", target) if k in FACE_EXCEPTIONS), None)
                if key is not None:
                    used.add(key)
                else:
                    found.append(f"{name}:{line}: {target} {what}".rstrip())
    return found, used


def test_code_outside_a_package_imports_only_its_face():
    found, used = faceless_imports(MODULES)
    assert found == []
    assert sorted(set(FACE_EXCEPTIONS) - used) == [], "an exception no import needs any more"


def test_the_face_check_fails_on_a_planted_reach_into_a_module(tmp_path):
    planted = tmp_path / "orchestrator" / "job" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("from orchestrator.trial import run_trial\n"
                       "from orchestrator.models import trajectory\n"  # an exception: allowed
                       "def f():\n    from orchestrator.trial.lifecycle import Trial, run_trial\n"
                       "    from orchestrator.trial import images\n")
    found, _ = faceless_imports({"orchestrator.job.planted": planted})
    assert [hit.split(": ", 1)[1] for hit in found] == [
        "orchestrator.trial.lifecycle Trial", "orchestrator.trial.lifecycle run_trial",
        "orchestrator.trial.images"]


def test_the_runtime_core_is_at_most_20_abstract_methods_each_with_its_contract():
    """The seam stays narrow (issue 47): at most 20 abstract methods on Runtime, each with a
    docstring that says what it raises; every other public method is an optional part
    (PART_METHODS, NotSupported unless a runtime has it) or has a documented default."""
    import inspect

    from orchestrator.errors import NotSupported
    from orchestrator.runtime.base import PART_METHODS, Runtime
    from orchestrator.runtime.fake import FakeRuntime

    core = sorted(Runtime.__abstractmethods__)
    assert 0 < len(core) <= 20, core
    for name in core:
        doc = inspect.getdoc(getattr(Runtime, name)) or ""
        assert "Raise" in doc or "raise" in doc, f"Runtime.{name}: no contract (what it raises)"
    optional = {m for methods in PART_METHODS.values() for m in methods}
    public = {n for n, v in vars(Runtime).items() if callable(v) and not n.startswith("_")}
    defaults = public - set(core) - optional
    assert defaults == {"unanswered", "data_root_space", "loop_disks", "open_host_ports",
                        "adopt_network", "remove_volume"}, "a new method: core, a part, or a default?"
    for name in optional | defaults:
        assert inspect.getdoc(getattr(Runtime, name)), f"Runtime.{name}: no docstring"
    bare = type("Bare", (FakeRuntime,), {m: getattr(Runtime, m) for m in optional})()
    for part, methods in PART_METHODS.items():  # the check sees what it checks
        try:
            getattr(bare, methods[0])(*(["x"] * (len(inspect.signature(getattr(Runtime, methods[0])).parameters) - 1)))
        except NotSupported as exc:
            assert exc.part == part
        else:
            raise AssertionError(f"{part}: the base's {methods[0]} did not raise NotSupported")


# No dicts at boundaries (issue 47): a public function (or a public class's method) of the
# models, the API or the executors' spec returns typed objects, never a bare dict: no
# `dict[...]`, `JsonObject` or `Mapping` anywhere in its return annotation (`list[dict]`
# and `X | dict` count). A TypedDict with its keys declared is typed. The exceptions are
# named, each with its reason; a key is "module:function" (Class.method for a method).
RECORD_MODULES = ("orchestrator.models", "orchestrator.api", "orchestrator.executors.spec")
BARE_DICT = ("dict", "Dict", "JsonObject", "Mapping", "MutableMapping")
DICT_EXCEPTIONS = {
    "orchestrator.models.trajectory:records": "an agent's own trajectory.jsonl lines: their shape "
                                              "is the agent's (DESIGN 3.6), read as found",
    "orchestrator.models.trajectory:event_of": "one of those lines' event, as the agent wrote it",
    "orchestrator.models.trajectory:tool_of": "one of those lines' tool call, as the agent wrote it",
    "orchestrator.models.manifest:flag_env": "environment variables (name -> value) for "
                                                      "a container, not a record",
}


def dict_returns(modules: dict[str, Path]) -> tuple[list[str], set[str]]:
    """Public functions of RECORD_MODULES whose return annotation holds a bare dict, and
    the exceptions that were used."""
    found, used = [], set()
    for name, path in sorted(modules.items()):
        if not any(name == m or name.startswith(m + ".") for m in RECORD_MODULES):
            continue

        def visit(body: list[ast.stmt], prefix: str, name: str = name) -> None:
            for node in body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    visit(node.body, f"{prefix}{node.name}.", name)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns \
                        and not node.name.startswith("_"):
                    names = {n.id for n in ast.walk(node.returns) if isinstance(n, ast.Name)} | \
                        {n.attr for n in ast.walk(node.returns) if isinstance(n, ast.Attribute)}
                    if isinstance(node.returns, ast.Constant) and isinstance(node.returns.value, str):
                        names = {n.id for n in ast.walk(ast.parse(node.returns.value, mode="eval"))
                                 if isinstance(n, ast.Name)}
                    if names & set(BARE_DICT):
                        key = f"{name}:{prefix}{node.name}"
                        if key in DICT_EXCEPTIONS:
                            used.add(key)
                        else:
                            found.append(f"{key} -> {ast.unparse(node.returns)}")

        visit(ast.parse(path.read_text()).body, "")
    return found, used


def test_no_public_function_of_the_models_the_api_or_the_spec_returns_a_bare_dict():
    found, used = dict_returns(MODULES)
    assert found == []
    assert sorted(set(DICT_EXCEPTIONS) - used) == [], "an exception no function needs any more"
    checked = [name for name in MODULES if any(name.startswith(m) for m in RECORD_MODULES)]
    assert "orchestrator.api.admin" in checked and "orchestrator.executors.spec" in checked


def test_the_dict_check_fails_on_a_planted_dict_return(tmp_path):
    planted = tmp_path / "orchestrator" / "api" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("from orchestrator.util import JsonObject\n"
                       "def fine() -> list[str]: ...\n"
                       "def _private() -> dict[str, int]: ...\n"
                       "def counts() -> dict[str, int]: ...\n"
                       "class Outcome:\n"
                       "    def rows(self) -> 'list[JsonObject] | None': ...\n")
    found, _ = dict_returns({"orchestrator.api.planted": planted})
    assert found == ["orchestrator.api.planted:counts -> dict[str, int]",
                     "orchestrator.api.planted:Outcome.rows -> 'list[JsonObject] | None'"]


# Implementation details are private by name (issue 47): a module-level function (not
# decorated: a Typer command or a validator is reached through its decorator) that nothing
# outside its module names (no other module of orchestrator/, no test, no bench script, no
# template, pyproject or the README, ARCHITECTURE.md and the tests' READMEs) has a leading
# underscore. Named exceptions: none today (the set stays for one a later change needs).
PUBLIC_UNUSED_EXCEPTIONS: set[tuple[str, str]] = set()


def named_elsewhere() -> dict[str, set[Path]]:
    """word -> the files (of the places above) that hold it."""
    sources = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py"),
               *PACKAGE.rglob("*.j2"), *(ROOT / "tests").rglob("*.md"),
               ROOT / "pyproject.toml", ROOT / "README.md", ROOT / "ARCHITECTURE.md"]
    index: dict[str, set[Path]] = {}
    for path in sources:
        for word in set(re.findall(r"\w+", path.read_text(errors="replace"))):
            index.setdefault(word, set()).add(path)
    return index


def public_but_unused(modules: dict[str, Path], index: dict[str, set[Path]]) -> list[tuple[str, str]]:
    found = []
    for name, path in sorted(modules.items()):
        if path.name == "__init__.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.decorator_list
                    and not node.name.startswith("_") and not index.get(node.name, set()) - {path}):
                found.append((name, node.name))
    return found


def test_a_function_nothing_outside_its_module_names_is_private_by_name():
    assert sorted(set(public_but_unused(MODULES, named_elsewhere())) - PUBLIC_UNUSED_EXCEPTIONS) == []


def test_the_private_by_name_rule_sees_an_unused_public_function(tmp_path):
    lonely = "lonely_" + "helper_" + "4d2a"  # spelled apart: this file must not name it
    module = tmp_path / "helpers.py"
    module.write_text(f"def {lonely}():\n    return 1\n\n\ndef _private_one():\n    return 2\n\n\n"
                      "@decorated\ndef registered_xyz():\n    return 3\n\n\ndef shared_helper():\n    return 4\n")
    index = named_elsewhere()
    index.setdefault("shared_helper", set()).add(tmp_path / "user.py")  # another module names it
    assert public_but_unused({"orchestrator.helpers": module}, index) == [("orchestrator.helpers", lonely)]
