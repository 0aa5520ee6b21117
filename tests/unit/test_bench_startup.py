"""bench/ measures start-up as a README install has it: orchestra imported from source
without bytecode, never compiled first (a compileall made start-up look 83 ms faster than
an editable install on a machine that sets PYTHONDONTWRITEBYTECODE)."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench_startup():
    spec = importlib.util.spec_from_file_location("bench_startup", ROOT / "bench" / "startup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_bench_compiles_orchestra():
    for path in sorted((ROOT / "bench").glob("*.py")):
        assert not re.search(r"import (compileall|py_compile)|compileall\.|py_compile\.|compile_dir\(",
                             path.read_text()), path


def test_the_timed_processes_import_orchestra_from_source_without_bytecode(tmp_path):
    startup = bench_startup()
    env = {**startup.readme_install(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    probe = ("import json, os, sys, orchestrator.cli.commands, orchestrator.job.runner\n"
             "mods = {n: m for n, m in sys.modules.items() if n.split('.')[0] == 'orchestrator'}\n"
             "print(json.dumps({n: [m.__file__, bool(m.__cached__ and os.path.exists(m.__cached__))]"
             " for n, m in mods.items()}))")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    loaded = json.loads(out.stdout)
    copy = str(tmp_path / "readme-install")
    assert len(loaded) > 20  # the CLI's and a run's modules, not only the package
    assert all(path.startswith(copy) for path, _ in loaded.values()), loaded
    assert not any(has_bytecode for _, has_bytecode in loaded.values()), loaded
    assert not list((tmp_path / "readme-install").rglob("*.pyc"))
    assert "compiled from source by every process" in startup.bytecode_note(env)
