"""Which FailureMode a trial ends in, and whether another attempt is made: the one place.

Who can fix what went wrong decides both (errors.py draws the exception tree):

- the machinery failed (the engine, the host, a launch, the model endpoint): infra_error,
  launch_error, endpoint_error. Retried within the job (RETRIED), unless the failure says
  another attempt would fail the same way (`not_retried`: a LaunchError with retryable False,
  e.g. the engine lacks the OCI runtime asked for) or the job is being cancelled.
- the task failed to build: build_error. Not retried within the job (the same Dockerfile builds
  the same way), but `--resume --retry-errors` runs it again (RERUN_ON_RESUME): someone may
  have fixed the network or the base in between.
- the agent's run ended abnormally: agent_timeout, oom, disk_limit (AGENT_KILLED: its container
  is killed and restarted for grading). The agent's result: graded, never retried.
- the grading failed: verifier_error, verifier_timeout. Never retried (test.sh is the task's).
- the audit voided the reward: answer_leak. Never retried.
- the job was cancelled: cancelled. Never retried, always run again on resume.
- the host can never fit it: infeasible. Not run, never retried.

What an attempt says about the agent follows from the same rule: an attempt the machinery
lost, a build that failed, a cancelled or an infeasible one says nothing (NOT_GRADED: the
regression gate leaves it out, report/gate.py); every other mode is graded.

Callers pass facts (an exception, an exit, a clock), never their own types: this module is
below trial/ and job/, which call it.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import NamedTuple

from orchestrator.errors import BuildFailed, LaunchError
from orchestrator.models.result import FailureMode, TrialResult

# Retried within the job, with backoff (job/scheduler.py), up to --max-retries.
RETRIED = frozenset({FailureMode.INFRA_ERROR, FailureMode.LAUNCH_ERROR, FailureMode.ENDPOINT_ERROR})
# Run again by `--resume --retry-errors` (job/runner.py); cancelled trials always are.
RERUN_ON_RESUME = RETRIED | {FailureMode.BUILD_ERROR}
# Says nothing about the agent: the machinery lost it, the task did not build, the job was
# cancelled or the host could never fit it. The regression gate does not count these.
NOT_GRADED = RERUN_ON_RESUME | {FailureMode.CANCELLED, FailureMode.INFEASIBLE}
# The agent's run ended abnormally: its container is killed (no process survives) before grading.
AGENT_KILLED = frozenset({FailureMode.AGENT_TIMEOUT, FailureMode.OOM, FailureMode.DISK_LIMIT})
BUILD_ERROR_CHARS = 4000  # a build's log is long: its tail says why


class Failure(NamedTuple):
    """A failure mode, the error that explains it, and why it is final if a retry could not help."""

    mode: FailureMode
    error: str
    not_retried: str | None = None

    def onto(self, result: TrialResult) -> None:
        """Set the result's failure_mode and error (and not_retried, if final)."""
        result.failure_mode, result.error = self.mode, self.error
        if self.not_retried is not None:
            result.not_retried = self.not_retried


def is_host_disk_full(exc: BaseException) -> bool:
    """ENOSPC: the host's (or the trial's own) disk is full."""
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


def failure_of(exc: BaseException, *, cancelled: bool, own_disk_full: Callable[[], bool],
               storage_mb: int | None = None) -> Failure:
    """What an exception out of a trial's phases makes of the trial.

    Args:
        exc: what a phase raised.
        cancelled: the job is being cancelled (or the phase raised the trial's Cancelled).
        own_disk_full: asked only on ENOSPC: whether the trial's own disk quota filled, not
            the host's (the caller raises on for the host's: the job stops).
        storage_mb: the trial's disk quota, for the message.
    """
    if is_host_disk_full(exc):
        if own_disk_full():
            return Failure(FailureMode.DISK_LIMIT,
                           f"the trial's own disk is full (storage_mb={storage_mb}): {exc}")
        return Failure(FailureMode.INFRA_ERROR, f"host disk full: {exc}")
    if isinstance(exc, BuildFailed):  # graded as the task's; a cancel turns it later (finalize)
        return Failure(FailureMode.BUILD_ERROR, str(exc)[-BUILD_ERROR_CHARS:])
    if cancelled:
        return JOB_CANCELLED
    if isinstance(exc, LaunchError):
        return Failure(FailureMode.LAUNCH_ERROR, str(exc), None if exc.retryable else
                       f"{exc.__class__.__name__}: another attempt would fail the same way")
    return Failure(FailureMode.INFRA_ERROR, f"{exc.__class__.__name__}: {exc}")


JOB_CANCELLED = Failure(FailureMode.CANCELLED, "job cancelled")


def setup_failure(exc: BaseException) -> Failure:
    """A step's setup.sh or healthcheck failed: the sandbox was not ready, a launch error."""
    return Failure(FailureMode.LAUNCH_ERROR, str(exc))


def infra_failure(error: str) -> Failure:
    """The machinery failed outside a trial's phases (a Ray node lost, a publish failed)."""
    return Failure(FailureMode.INFRA_ERROR, error)


def agent_ended(*, disk_tripped: bool, timed_out: bool, exit_code: int | None, elapsed: float,
                timeout: float, oom_killed: Callable[[], bool], storage_mb: int | None,
                memory_mb: int) -> Failure | None:
    """How the agent's run ended, if abnormally (None: it ended by itself).

    The clock decides a timeout: an agent that exits 124 early did not time out. oom_killed is
    asked only if neither the disk nor the clock decided.
    """
    if disk_tripped:
        return Failure(FailureMode.DISK_LIMIT, f"writable layer passed storage_mb={storage_mb}")
    if timed_out or (exit_code in (124, 137, None) and elapsed >= timeout):
        return Failure(FailureMode.AGENT_TIMEOUT, f"agent ran past agent.timeout_sec={timeout:g}")
    if oom_killed():
        return Failure(FailureMode.OOM, f"out of memory at memory_mb={memory_mb}")
    return None


def verifier_ended(*, disk_tripped: bool, timed_out: bool, exit_code: int | None, elapsed: float,
                   timeout: float, storage_mb: int | None) -> Failure | None:
    """How test.sh's run ended, if it cannot be graded (None: read its reward). The clock
    decides a timeout (busybox timeout exits 143)."""
    if disk_tripped:
        return Failure(FailureMode.VERIFIER_ERROR, f"test.sh's writes passed storage_mb={storage_mb}")
    if timed_out or (exit_code not in (0, None) and elapsed >= timeout):
        return verifier_timeout(timeout)
    return None


def verifier_timeout(timeout: float) -> Failure:
    return Failure(FailureMode.VERIFIER_TIMEOUT, f"test.sh ran past verifier.timeout_sec={timeout:g}")


def verifier_error(message: str) -> Failure:
    """test.sh's reward could not be read, or its container passed its disk quota."""
    return Failure(FailureMode.VERIFIER_ERROR, message)


def endpoint_failed(mode: FailureMode, headline: float, *, upstream_errors: int, abandoned: int,
                    last_error: str | None) -> Failure | None:
    """The provider failed, not the agent: a trial any of whose model calls the upstream
    failed after the proxy's retries (down, rate-limited past them, an error or a break
    after its stream began, no first byte in time) is an endpoint error, retried from a
    fresh folder and never graded, whatever its reward (what the agent made of a cut
    answer is not its work). An otherwise clean trial below a pass whose calls the agent
    abandoned is one too."""
    if mode != FailureMode.NONE:
        return None
    if upstream_errors:
        return Failure(FailureMode.ENDPOINT_ERROR, "the model endpoint failed after retries: " + (last_error or ""))
    if abandoned and headline < 1.0:
        return Failure(FailureMode.ENDPOINT_ERROR, "the model endpoint did not answer before the agent "
                                                   "stopped waiting (the proxy did not re-send)")
    return None


def cancelled_in_phase(mode: FailureMode, error: str | None, graded: bool) -> Failure | None:
    """A trial interrupted by the job's cancellation, in whatever phase (the kill may have
    surfaced as a verifier error, a timeout or an engine error), is cancelled and resumable;
    a graded clean trial and an answer leak keep theirs."""
    if (graded and mode == FailureMode.NONE) or mode == FailureMode.ANSWER_LEAK:
        return None
    return Failure(FailureMode.CANCELLED, f"job cancelled (in phase: {mode.value}: {error})"
                   if mode != FailureMode.NONE else "job cancelled")


def steps_outcome(graded: bool, step_modes: list[FailureMode]) -> FailureMode:
    """A multi-step trial's mode: none if it has a reward, else its last failed step's (a
    verifier error if no step failed yet none was graded)."""
    failed = [m for m in step_modes if m != FailureMode.NONE]
    return FailureMode.NONE if graded else (failed[-1] if failed else FailureMode.VERIFIER_ERROR)


def answer_leak(leaks: list[str]) -> Failure:
    """The audit found the answer in what the agent saw: the reward is voided."""
    return Failure(FailureMode.ANSWER_LEAK, "answer leak: " + "; ".join(leaks[:5]))


def is_retried(mode: FailureMode, not_retried: str | None, cancelling: bool) -> bool:
    """Whether the job makes another attempt (the scheduler then counts it against
    --max-retries, or frees it when the engine was gone)."""
    return mode in RETRIED and not_retried is None and not cancelling


def rerun_on_resume(mode: FailureMode, finished: bool, retry_errors: bool) -> bool:
    """Whether `--resume` runs a trial with this result again: a cancelled or unfinished one
    always; with --retry-errors also the machinery's errors and build errors."""
    return mode == FailureMode.CANCELLED or not finished or (retry_errors and mode in RERUN_ON_RESUME)
