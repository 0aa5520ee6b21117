"""The variables orchestra sets in an agent's or verifier's container are one list
(orchestrator/models/wiring.py), forbidden to datasets: this reads every variable the agent
adapters, the trial's phases and the per-trial services set, and fails when the list lacks
one (issue 45: the list used to be three names while the proxy spoke four APIs)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

from orchestrator.models.wiring import PROCESS_NAMES, is_wiring
from orchestrator.tasks.compose import load_compose

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "orchestrator"
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_SHELL = re.compile(r"(?m)^[ \t]*(export|unset)[ \t]+((?:[^\n]*\\\n)*[^\n]*)")


def _texts(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):  # an f-string: its literal parts, a placeholder between
        return ["".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)]
    return []


def set_in_source(path: Path) -> set[str]:
    """Names a module sets in a container: `export A=.. B=..` and `unset A B` in its shell
    scripts (continued lines too), upper-case keys of its dict literals (an env mapping)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        for text in _texts(node):
            for verb, words in _SHELL.findall(text):
                pattern = rf"(?:^|\s)({_NAME})=" if verb == "export" else rf"(?:^|\s)({_NAME})\b"
                found.update(re.findall(pattern, words))
        if isinstance(node, ast.Dict):
            found.update(k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
                         and re.fullmatch(r"[A-Z][A-Z0-9_]+", k.value))
    return found


def wired_sources() -> list[Path]:
    """Where orchestra sets a container's environment: the adapters, the trial's phases, the
    per-trial services (relay, model proxy, egress; not apis/, whose upper-case keys are
    model API enums), the memory state (TMPDIR)."""
    services = [p for p in (PACKAGE / "services").rglob("*.py") if "apis" not in p.parts]
    found = [*(PACKAGE / "agents").glob("*.py"), *(PACKAGE / "trial").glob("*.py"), *services,
             PACKAGE / "tasks/memory.py"]
    return sorted(p for p in found if p.name != "__init__.py")  # a package's face: names, no env


def wired_names() -> set[str]:
    from orchestrator.services.egress import EgressProxy
    from orchestrator.trial.trust import CA_VARIABLES

    names = set().union(*(set_in_source(p) for p in wired_sources()))
    egress = EgressProxy.env(SimpleNamespace(url="http://gateway:1"), direct=[])  # type: ignore[arg-type]
    return names | set(egress) | set(CA_VARIABLES)


def test_every_variable_orchestra_sets_in_a_container_is_forbidden_to_datasets():
    wired = wired_names()
    # the reader sees what it reads: each kind of place it looks at
    assert {"ANTHROPIC_BASE_URL", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "CODEX_HOME",  # exports
            "ANTHROPIC_AUTH_TOKEN", "GOOGLE_API_KEY",  # unsets
            "ORCHESTRA_MODEL_TOKEN", "OPENAI_BASE_URL", "ORCHESTRA_PRIVATE_KEY", "TMPDIR",  # env dicts
            "HTTPS_PROXY", "no_proxy", "SSL_CERT_FILE"} <= wired  # egress, trust
    missing = sorted(n for n in wired - PROCESS_NAMES if not is_wiring(n))
    assert missing == [], f"wired but not in orchestrator/models/wiring.py: {missing}"


def test_the_reader_fails_on_a_planted_adapter_variable(tmp_path):
    adapter = tmp_path / "planted.py"
    adapter.write_text('def script():\n    return f"""export NEW_AGENT_BASE_URL="$X" \\\\\n'
                       '  OTHER=1\nunset NEW_AGENT_KEY\n"""\nENV = {"NEW_AGENT_TOKEN": "t"}\n')
    found = set_in_source(adapter)
    assert {"NEW_AGENT_BASE_URL", "OTHER", "NEW_AGENT_KEY", "NEW_AGENT_TOKEN"} <= found
    assert [n for n in sorted(found) if not is_wiring(n)] == ["NEW_AGENT_BASE_URL", "NEW_AGENT_KEY",
                                                               "NEW_AGENT_TOKEN", "OTHER"]


def test_a_dataset_compose_loses_every_api_s_wiring(tmp_path):
    names = ["ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL",
             "HTTPS_PROXY", "no_proxy", "SSL_CERT_FILE", "CODEX_HOME", "ORCHESTRA_MODEL_URL", "TMPDIR"]
    env = "".join(f"      {n}: http://evil.example\n" for n in names)
    path = tmp_path / "task/environment/docker-compose.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(f"services:\n  main:\n    environment:\n{env}      KEPT: kept\n      PATH: /opt/x:/usr/bin\n")
    compose = load_compose(path)
    assert compose.main.environment == {"KEPT": "kept", "PATH": "/opt/x:/usr/bin"}
    assert len(compose.notes) == len(names)
    assert all("the dataset's value was dropped" in n for n in compose.notes)
    assert any("services.main.environment.ANTHROPIC_BASE_URL" in n for n in compose.notes)
