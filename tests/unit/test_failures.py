"""The one place that decides a trial's FailureMode and whether it is retried (models/failures.py):
a table of facts in, a mode (and retry verdict) out; every FailureMode at least once."""

from __future__ import annotations

import errno

import pytest

from orchestrator.errors import BuildFailed, LaunchError, NotSupported, RuntimeFault, RuntimeMissing
from orchestrator.models import (
    AGENT_KILLED,
    RERUN_ON_RESUME,
    RETRIED,
    FailureMode,
    TrialResult,
    agent_ended,
    answer_leak,
    cancelled_in_phase,
    endpoint_failed,
    failure_of,
    infra_failure,
    is_retried,
    rerun_on_resume,
    setup_failure,
    steps_outcome,
    verifier_ended,
    verifier_error,
    verifier_timeout,
)

M = FailureMode
ENOSPC = OSError(errno.ENOSPC, "No space left on device")

# (exception, cancelled, own disk full) -> mode, final (not_retried set)
EXCEPTIONS = [
    (ENOSPC, False, True, M.DISK_LIMIT, False),
    (ENOSPC, False, False, M.INFRA_ERROR, False),
    (ENOSPC, True, False, M.INFRA_ERROR, False),  # the host's disk stops the job even when cancelling
    (BuildFailed("FROM nowhere"), False, False, M.BUILD_ERROR, False),
    (BuildFailed("FROM nowhere"), True, False, M.BUILD_ERROR, False),  # finalize turns it cancelled
    (RuntimeFault("500"), True, False, M.CANCELLED, False),
    (LaunchError("seed failed"), False, False, M.LAUNCH_ERROR, False),
    (RuntimeMissing("no runsc"), False, False, M.LAUNCH_ERROR, True),
    (NotSupported("commit", "commit", "fake"), False, False, M.LAUNCH_ERROR, True),
    (RuntimeFault("500 from the engine"), False, False, M.INFRA_ERROR, False),
    (ValueError("a bug"), False, False, M.INFRA_ERROR, False),
]


@pytest.mark.parametrize(("exc", "cancelled", "own", "mode", "final"), EXCEPTIONS)
def test_an_exception_becomes_one_mode(exc: BaseException, cancelled: bool, own: bool,
                                       mode: FailureMode, final: bool) -> None:
    failure = failure_of(exc, cancelled=cancelled, own_disk_full=lambda: own, storage_mb=64)
    assert failure.mode == mode
    assert (failure.not_retried is not None) == final
    assert is_retried(failure.mode, failure.not_retried, cancelling=False) == (mode in RETRIED and not final)


def test_own_disk_is_asked_only_on_enospc() -> None:
    asked: list[int] = []

    def own() -> bool:
        asked.append(1)
        return True

    assert failure_of(RuntimeFault("x"), cancelled=False, own_disk_full=own).mode == M.INFRA_ERROR
    assert asked == []
    assert "storage_mb=64" in failure_of(ENOSPC, cancelled=False, own_disk_full=own, storage_mb=64).error


# disk tripped, timed out, exit, elapsed, oom -> mode (None: ended by itself)
AGENT_ENDS = [
    (True, True, 137, 99.0, True, M.DISK_LIMIT),
    (False, True, 0, 1.0, True, M.AGENT_TIMEOUT),
    (False, False, 124, 10.0, False, M.AGENT_TIMEOUT),  # the clock decides
    (False, False, 124, 2.0, False, None),  # exits 124 early: not a timeout
    (False, False, None, 10.0, False, M.AGENT_TIMEOUT),
    (False, False, 137, 2.0, True, M.OOM),
    (False, False, 1, 2.0, False, None),
]


@pytest.mark.parametrize(("disk", "timed_out", "code", "elapsed", "oom", "mode"), AGENT_ENDS)
def test_how_the_agent_ended(disk: bool, timed_out: bool, code: int | None, elapsed: float, oom: bool,
                             mode: FailureMode | None) -> None:
    ended = agent_ended(disk_tripped=disk, timed_out=timed_out, exit_code=code, elapsed=elapsed,
                        timeout=10.0, oom_killed=lambda: oom, storage_mb=64, memory_mb=512)
    assert (ended.mode if ended else None) == mode
    if ended is not None:
        assert ended.mode in AGENT_KILLED and not is_retried(ended.mode, None, False)


VERIFIER_ENDS = [
    (True, False, 0, 1.0, M.VERIFIER_ERROR),
    (False, True, 0, 1.0, M.VERIFIER_TIMEOUT),
    (False, False, 143, 30.0, M.VERIFIER_TIMEOUT),  # busybox timeout exits 143
    (False, False, 1, 1.0, None),  # a failing test.sh is graded, not an error
    (False, False, 0, 30.0, None),
]


@pytest.mark.parametrize(("disk", "timed_out", "code", "elapsed", "mode"), VERIFIER_ENDS)
def test_how_the_verifier_ended(disk: bool, timed_out: bool, code: int | None, elapsed: float,
                                mode: FailureMode | None) -> None:
    ended = verifier_ended(disk_tripped=disk, timed_out=timed_out, exit_code=code, elapsed=elapsed,
                           timeout=30.0, storage_mb=64)
    assert (ended.mode if ended else None) == mode
    assert verifier_timeout(30.0).mode == M.VERIFIER_TIMEOUT
    assert verifier_error("no reward.txt").mode == M.VERIFIER_ERROR


@pytest.mark.parametrize(("mode", "headline", "errors", "abandoned", "expected"), [
    (M.NONE, 0.0, 2, 0, M.ENDPOINT_ERROR),
    (M.NONE, 0.0, 0, 1, M.ENDPOINT_ERROR),
    # the upstream failed a call (a cut stream, say): never graded, even a pass (issue 59)
    (M.NONE, 1.0, 2, 0, M.ENDPOINT_ERROR),
    (M.NONE, 1.0, 0, 1, None),  # it abandoned a call and passed anyway: the agent's pass
    (M.AGENT_TIMEOUT, 0.0, 2, 0, None),  # an earlier mode stays
    (M.NONE, 0.0, 0, 0, None),
])
def test_the_endpoint_failed(mode: FailureMode, headline: float, errors: int, abandoned: int,
                             expected: FailureMode | None) -> None:
    got = endpoint_failed(mode, headline, upstream_errors=errors, abandoned=abandoned, last_error="503")
    assert (got.mode if got else None) == expected


@pytest.mark.parametrize(("mode", "graded", "expected"), [
    (M.NONE, True, None),  # graded clean before the cancel: kept
    (M.NONE, False, M.CANCELLED),
    (M.VERIFIER_ERROR, False, M.CANCELLED),
    (M.AGENT_TIMEOUT, True, M.CANCELLED),
    (M.ANSWER_LEAK, False, None),  # the audit's verdict stays
])
def test_a_cancel_in_any_phase(mode: FailureMode, graded: bool, expected: FailureMode | None) -> None:
    got = cancelled_in_phase(mode, "boom", graded)
    assert (got.mode if got else None) == expected
    if got is not None and mode != M.NONE:
        assert got.error == f"job cancelled (in phase: {mode.value}: boom)"


def test_the_other_rules() -> None:
    assert setup_failure(RuntimeError("setup.sh exited 1")).mode == M.LAUNCH_ERROR
    assert infra_failure("ray: node lost").mode == M.INFRA_ERROR
    assert answer_leak(["a", "b"]).mode == M.ANSWER_LEAK
    assert steps_outcome(True, [M.LAUNCH_ERROR]) == M.NONE
    assert steps_outcome(False, [M.NONE, M.LAUNCH_ERROR, M.NONE]) == M.LAUNCH_ERROR
    assert steps_outcome(False, [M.NONE]) == M.VERIFIER_ERROR


@pytest.mark.parametrize("mode", list(FailureMode))
def test_every_mode_has_one_retry_verdict(mode: FailureMode) -> None:
    """Retried within the job: the machinery's errors only; on --resume --retry-errors also
    build errors; cancelled and unfinished trials always run again on resume."""
    retried = {M.INFRA_ERROR, M.LAUNCH_ERROR, M.ENDPOINT_ERROR}
    assert is_retried(mode, None, cancelling=False) == (mode in retried)
    assert not is_retried(mode, "RuntimeMissing: final", cancelling=False)
    assert not is_retried(mode, None, cancelling=True)
    assert rerun_on_resume(mode, True, retry_errors=True) == (mode in retried | {M.BUILD_ERROR, M.CANCELLED})
    assert rerun_on_resume(mode, True, retry_errors=False) == (mode == M.CANCELLED)
    assert rerun_on_resume(mode, False, retry_errors=False)
    assert (mode in RERUN_ON_RESUME) == (mode in retried | {M.BUILD_ERROR})


def test_a_failure_lands_on_the_result() -> None:
    result = TrialResult(trial_id="t", job="j", task="x", task_path="x", content_hash="h", condition="c",
                         condition_hash="h", agent="a", attempt=1)
    failure_of(RuntimeMissing("no runsc"), cancelled=False, own_disk_full=lambda: False).onto(result)
    assert result.failure_mode == M.LAUNCH_ERROR and result.not_retried and "no runsc" in (result.error or "")
