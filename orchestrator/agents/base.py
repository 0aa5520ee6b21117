"""The agent adapter interface."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from orchestrator.paths import INSTRUCTION
from orchestrator.runtime import ExecResult, Runtime
from orchestrator.tasks import Task

# Exit codes of the agents orchestra ships (the reference agent, the installed agents' run
# scripts): how the agent stopped, read back into `agent_outcome`. Any other non-zero code
# is `crashed`; a command agent that happens to use these codes gets these outcomes.
EXIT_DEADLINE = 3  # stopped itself because the deadline was near -> timeout
EXIT_BUDGET = 4  # the proxy refused on budget -> budget_exceeded (also seen in the proxy)
EXIT_STEP_LIMIT = 5  # its own step limit, or the model looping -> step_limit
EXIT_ENDPOINT = 6  # the endpoint failed it -> endpoint_error
EXIT_OUTCOMES = {EXIT_DEADLINE: "timeout", EXIT_BUDGET: "budget_exceeded",
                 EXIT_STEP_LIMIT: "step_limit", EXIT_ENDPOINT: "endpoint_error"}


class Agent(Protocol):
    @property
    def name(self) -> str:
        """The agent's name (AGENT_NAMES): a class attribute, or an installed CLI's recipe's."""
        ...

    def files(self, task: Task) -> dict[str, bytes]:
        """Files to copy into the sandbox before the run: {absolute path: content}."""
        ...

    def env(self, task: Task) -> dict[str, str]:
        """Extra environment for the agent command."""
        ...

    def command(self, task: Task) -> str | None:
        """The shell command to run in the task workdir, or None to run nothing.
        Placeholders {instruction_file}, {workdir} and {deadline} are filled in at run time."""
        ...

    def binds(self) -> dict[str, str]:
        """Host folders mounted read-only into the agent container: {host path: path}."""
        ...

    def finish(self, agent_dir: Path, exchanges: Path) -> str | None:
        """After copy-out: write agent_dir/trajectory.jsonl from what the agent left (its own
        log, or the proxy's `exchanges`). Returns why the audit is incomplete, or None."""
        ...


class Plain:
    """Defaults for an agent that mounts nothing and writes its trajectory itself (or none)."""

    def binds(self) -> dict[str, str]:
        return {}

    def finish(self, agent_dir: Path, exchanges: Path) -> str | None:
        return None


def render_command(template: str, workdir: str, deadline: float) -> str:
    """Fill a command template's {instruction_file}, {workdir} and {deadline}."""
    for name, value in (("{instruction_file}", INSTRUCTION), ("{workdir}", workdir),
                        ("{deadline}", str(int(deadline)))):
        template = template.replace(name, value)
    return template


KILL_AFTER_SEC = 5  # `timeout -k`: SIGTERM at the deadline, SIGKILL this much later


def under_timeout(run: str, seconds: float, tool: str | None = None) -> str:
    """A shell line that execs `run` (a command line) under `timeout -k`: SIGTERM after
    `seconds`, SIGKILL KILL_AFTER_SEC later. `tool`: the host's static timeout, always there;
    otherwise the image's, and in an image without one, `run` as is (the caller's host-side
    deadline still ends it). The one wrapper for the agent, its workers and the verifier."""
    if tool is not None:
        return f"exec {tool} -k {KILL_AFTER_SEC} {seconds:g} {run}"
    return (f"if command -v timeout >/dev/null 2>&1; then exec timeout -k {KILL_AFTER_SEC} {seconds:g} {run}; "
            f"else exec {run}; fi")


@dataclass
class AgentRun:
    """One run of an agent the host talks to while it runs (`Conversing`)."""

    runtime: Runtime
    container: str
    command: str  # the rendered command line (render_command), to run in `workdir`
    env: dict[str, str]
    workdir: str
    user: str | None
    timeout: float  # seconds from the start to `deadline`
    deadline: float  # time.time() by which its work must be done
    stop: threading.Event  # the job was cancelled
    task: Task


@runtime_checkable
class Conversing(Protocol):
    """An agent whose command the host starts attached and talks to (acp: JSON-RPC over
    its stdio) instead of running it to its end."""

    def converse(self, run: AgentRun) -> ExecResult:
        """Start it, talk to it until its work is done or the deadline, end it; how it
        ended (`timed_out` when the deadline ended its work)."""
        ...
