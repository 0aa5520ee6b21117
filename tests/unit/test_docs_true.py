"""Documentation that states what is there: the models and report packages' docstrings name
every module they hold, and the README promises no latency bound nothing holds."""

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("package", ["orchestrator.models", "orchestrator.report"])
def test_the_package_docstring_names_every_module(package):
    module = importlib.import_module(package)
    doc = module.__doc__ or ""
    names = [m.name for m in pkgutil.iter_modules(module.__path__) if not m.name.startswith("_")]
    assert names and [n for n in names if not re.search(rf"\b{n}\b", doc)] == [], doc
    assert "later" not in doc  # what is there, not what might come


def test_the_readme_promises_no_bystander_bound_that_nothing_holds():
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert not re.search(r"within \d+(\.\d+)?x of quiet", readme)
    # what the latency beside a flood is: bench's figures, recorded in bench/RESULTS.md
    for figure in ("bystander_relay_p95_ratio", "bystander_model_p95_ratio"):
        assert figure in readme and figure in (ROOT / "bench" / "RESULTS.md").read_text()
        assert figure in (ROOT / "bench" / "run.py").read_text()
