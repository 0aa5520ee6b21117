"""Each package's face (its `__init__`) loads its names lazily at run time (`public_face`) and
declares the same names for the type checker (`if TYPE_CHECKING:` imports): the lazy map,
the TYPE_CHECKING imports and `__all__` say the same thing, every name resolves to its
module's object, and no name is also a submodule's (once that module is imported, the
package's attribute would be the module, not the name)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "orchestrator"


def face_of(path: Path) -> tuple[dict[str, str], set[tuple[str, str]], list[str], set[str]]:
    """(lazy map name -> module, TYPE_CHECKING (module, name) imports, __all__, names the
    __init__ defines itself) read from a face's source."""
    tree = ast.parse(path.read_text())
    lazy: dict[str, str] = {}
    declared: set[tuple[str, str]] = set()
    exported: list[str] = []
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            declared |= {(stmt.module or "", alias.asname or alias.name) for stmt in node.body
                         if isinstance(stmt, ast.ImportFrom) for alias in stmt.names}
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and getattr(node.value.func, "id", None) == "public_face":
            mapping = node.value.args[1]
            assert isinstance(mapping, ast.Dict)
            lazy = {ast.literal_eval(k): ast.literal_eval(v) for k, v in zip(mapping.keys, mapping.values,
                                                                             strict=True)
                    if k is not None}
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            exported = list(ast.literal_eval(node.value))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return lazy, declared, exported, defined


FACES = sorted(".".join(p.parent.relative_to(ROOT).parts) for p in PACKAGE.rglob("__init__.py")
               if p.parent != PACKAGE and "public_face" in p.read_text())


def test_the_faces_are_found():
    assert {"orchestrator.models", "orchestrator.report", "orchestrator.view", "orchestrator.trial",
            "orchestrator.services.relay", "orchestrator.agents", "orchestrator.executors"} <= set(FACES)


def declaration_problems(path: Path, package: str) -> list[str]:
    """How a face's lazy map, its TYPE_CHECKING imports and __all__ disagree ([] if not)."""
    lazy, declared, exported, defined = face_of(path)
    problems = [] if lazy else ["no lazy map"]
    typed = {name: module.removeprefix(f"{package}.") for module, name in declared
             if module.startswith(f"{package}.")}
    problems += [f"{name}: lazy from {lazy.get(name)}, typed from {typed.get(name)}"
                 for name in sorted(set(lazy) | set(typed)) if lazy.get(name) != typed.get(name)]
    if sorted(exported) != sorted(set(lazy) | (set(exported) & defined)):
        problems.append("__all__ is not the lazy map plus what the face defines itself")
    return problems


@pytest.mark.parametrize("package", FACES)
def test_a_face_declares_for_the_type_checker_what_it_loads_lazily(package):
    """The TYPE_CHECKING imports are exactly the lazy map: mypy sees each name's real type."""
    assert declaration_problems(ROOT / Path(*package.split(".")) / "__init__.py", package) == []


@pytest.mark.parametrize("package", FACES)
def test_every_name_of_a_face_resolves_to_its_modules_object(package):
    face = importlib.import_module(package)
    lazy, _, exported, _ = face_of(ROOT / Path(*package.split(".")) / "__init__.py")
    submodules = {m.name for m in pkgutil.iter_modules(face.__path__)}
    for name, module in lazy.items():
        assert name not in submodules, f"{package}.{name} is also a submodule's name"
        assert getattr(face, name) is getattr(importlib.import_module(f"{package}.{module}"), name), name
    for name in exported:
        assert hasattr(face, name), name
    with pytest.raises(AttributeError):
        face.no_such_name  # noqa: B018


def test_the_face_check_fails_on_a_name_missing_from_the_type_checker(tmp_path):
    planted = tmp_path / "__init__.py"
    planted.write_text('"""x"""\nfrom typing import TYPE_CHECKING\nfrom orchestrator import public_face\n'
                       "if TYPE_CHECKING:\n    from orchestrator.trial.context import TrialContext\n"
                       '__all__ = ["TrialContext", "run_trial", "gone"]\n'
                       '__getattr__, __dir__ = public_face(__name__, {"TrialContext": "context", '
                       '"run_trial": "lifecycle"})\n')
    assert declaration_problems(planted, "orchestrator.trial") == [
        "run_trial: lazy from lifecycle, typed from None",
        "__all__ is not the lazy map plus what the face defines itself"]


def test_mypy_sees_a_face_name_with_its_real_type(tmp_path):
    """Through a face, a name keeps its type: assigning it to an int is an error for each
    (were a face's names Any to mypy, there would be none)."""
    from mypy import api

    probe = tmp_path / "probe.py"
    probe.write_text("from orchestrator.models import TrialResult\n"
                     "from orchestrator.services import start_relay\n"
                     "from orchestrator.trial import run_trial\n"
                     "a: int = TrialResult\nb: int = start_relay\nc: int = run_trial\n")
    out, _, status = api.run([str(probe), "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
                              "--follow-imports=silent"])
    errors = [line for line in out.splitlines() if "error: Incompatible types in assignment" in line]
    assert status == 1 and len(errors) == 3, out
    assert 'type "type[TrialResult]"' in errors[0]
    assert "TrialRelay]" in errors[1]  # start_relay, through services' face and relay's
    assert "TrialResult]" in errors[2]  # run_trial returns one
