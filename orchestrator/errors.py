"""orchestra's one exception tree: who can fix what went wrong decides the exit code and
whether a trial is retried.

    OrchestraError            exit 70: orchestra itself failed (a bug; the traceback is kept)
    |-- InputError            exit 2: what the user can fix (a task, manifest, endpoint, flag);
    |                         the message names the file and the field; nothing has started
    |-- InfraError            exit 3: what the host or the engine did
    |   |-- RuntimeFault      the engine failed a call: a trial's infra_error, retried
    |   |   `-- SidecarFailed a compose service did not start or turned unhealthy
    |   |-- LaunchError       a trial's sandbox could not be started or seeded: launch_error,
    |   |   |                 retried (raised by the trial's start and seed phases)
    |   |   |-- RuntimeMissing the engine has no OCI runtime by the name asked for (--oci-runtime,
    |   |   |                 a manifest's sandbox.oci_runtime): launch_error, never retried
    |   |   `-- NotSupported  the runtime lacks an optional part a trial asked for (commit,
    |   |                     registry, sidecar networks...; runtime/base.py Part): launch_error,
    |   |                     never retried (pre-flight refuses it first where it can)
    |   |-- EngineGone        the engine did not answer within --engine-wait: the job stops
    |   |-- EngineDiskFull    the engine's data root is nearly full: the job stops
    |   `-- JobDiskFull       the job folder's disk is full: the job stops
    `-- TaskError             what the task did: graded, never retried
        `-- BuildFailed       its Dockerfile did not build: build_error

What the agent did is never an exception: it is the trial's failure_mode (agent_timeout,
oom, disk_limit, ...) and its reward. The other exception classes (HttpError, RelayError,
Refused, Retryable, SeedError, RewardError, StepSetupFailed, Unhealthy, Cancelled, ...) are
signals inside one module or service, turned into a response, a failure mode or one of the
above at its edge; none crosses a layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic import ValidationError


class OrchestraError(Exception):
    exit_code = 70  # EX_SOFTWARE: never 1, which a pipeline reads as "a gate failed"


class InputError(OrchestraError):
    """Bad user input. The message names the file and the field."""

    exit_code = 2

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class InfraError(OrchestraError):
    """The machine cannot run trials (Docker unreachable, no base image...)."""

    exit_code = 3


class RuntimeFault(InfraError):
    """The engine failed (API error, connection lost): an infrastructure failure."""


class LaunchError(InfraError):
    """A trial's sandbox could not be started or seeded (the cause is chained)."""

    retryable = True  # False: another attempt would fail the same way (not retried)


class RuntimeMissing(LaunchError):
    """The engine has no OCI runtime registered by the name a container asked for: every
    attempt would fail the same way until someone registers it, so it is not retried."""

    retryable = False


class NotSupported(LaunchError):
    """The runtime does not have an optional part (runtime/base.py `Part`) that a trial or
    a command asked of it: every attempt would fail the same way, so it is not retried.
    `part` names it; `Capabilities.parts` says beforehand which parts a runtime has."""

    retryable = False

    def __init__(self, part: str, method: str, runtime: str):
        super().__init__(f"{method}: not supported by the {runtime} runtime (it has no "
                         f"'{part}' part; Capabilities.parts lists what it has)")
        self.part, self.method = part, method


class TaskError(OrchestraError):
    """The task itself failed where orchestra needed it to work (graded, not retried)."""


class BuildFailed(TaskError):
    """The task's Dockerfile did not build; the message holds the log tail."""


def validation_problems(file: Path, error: ValidationError, prefix: str = "",
                        explain_unknown: bool = False) -> list[str]:
    """A pydantic ValidationError as "FILE: field 'a.b': message" lines (DESIGN 2.1)."""
    problems = []
    for item in error.errors():
        field = prefix + ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"]
        if explain_unknown and item["type"] == "extra_forbidden":
            message = "unknown key (check the spelling; see DESIGN 3.1 for the fields)"
        problems.append(f"{file}: field '{field}': {message}")
    return problems
