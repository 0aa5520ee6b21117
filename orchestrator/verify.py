"""Verify (DESIGN 2 step 8): run tests/test.sh in a fresh verifier container with its own
timeout, then read the reward: reward.json (flat map of numbers) first, else reward.txt."""

from __future__ import annotations

import json
import math
import shlex
import uuid
from pathlib import Path

from orchestrator.archive import safe_extract, spool_directory, tar_directory, tar_files
from orchestrator.images import TaskImages
from orchestrator.models.result import FailureMode, TrialResult
from orchestrator.paths import ARTIFACTS, TESTS, VERIFIER_LOGS, TrialDir
from orchestrator.runtime.base import LABEL_IMAGE_KIND, SandboxSpec
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.runtime.watchdog import DiskWatchdog
from orchestrator.sandbox import Sandbox, read_limits, reset_verifier_logs
from orchestrator.tasks import Task

STAGED_TESTS = "/.orchestra-tests"
EVIDENCE_NAME = "relay-evidence.json"

MAX_REWARD_FILE = 1024 * 1024


class RewardError(ValueError):
    """The verifier left no usable reward; the message says which file and why."""


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RewardError(f"{where}: {value!r} is not a number")
    if not math.isfinite(value):
        raise RewardError(f"{where}: {value!r} is not finite")
    return float(value)


def read_reward(verifier_dir: Path) -> dict[str, float]:
    json_path, txt_path = verifier_dir / "reward.json", verifier_dir / "reward.txt"
    if json_path.is_file():
        if json_path.stat().st_size > MAX_REWARD_FILE:
            raise RewardError("reward.json: larger than 1 MB")
        try:
            data = json.loads(json_path.read_text(errors="replace"))
        except json.JSONDecodeError as exc:
            raise RewardError(f"reward.json: not JSON ({exc})") from exc
        if not isinstance(data, dict) or not data:
            raise RewardError("reward.json: expected a non-empty flat map of numbers")
        reward = {str(k): _number(v, f"reward.json: key {k!r}") for k, v in data.items()}
        if "reward" not in reward:
            if len(reward) != 1:
                raise RewardError("reward.json: no 'reward' key to use as the headline")
            reward["reward"] = next(iter(reward.values()))
        return reward
    if txt_path.is_file():
        text = txt_path.read_text(errors="replace")[:1000].strip()
        try:
            return {"reward": _number(float(text), "reward.txt")}
        except ValueError as exc:
            if isinstance(exc, RewardError):
                raise
            raise RewardError(f"reward.txt: {text[:80]!r} is not one number") from exc
    raise RewardError("the verifier wrote neither /logs/verifier/reward.json nor reward.txt")


def verify(runtime: DockerRuntime, task: Task, images: TaskImages, box: Sandbox,
           paths: TrialDir, result: TrialResult, evidence: Path | None = None,
           watchdog: DiskWatchdog | None = None) -> None:
    """A fresh verifier container, network none, its own timeout and quotas (cpus, memory,
    pids, and disk: the writable-layer watchdog holds it to storage_mb); /tests only now."""
    verifier = task.config.verifier
    environment = task.config.environment
    result.verifier_forgeable = verifier.environment_mode == "shared"
    if verifier.environment_mode == "shared":
        image = runtime.commit(box.agent_container, f"orchestra/snapshot/{box.trial_id[:16]}",
                               uuid.uuid4().hex[:8], {LABEL_IMAGE_KIND: "snapshot", "orchestra.image.job": box.job},
                               env=runtime.image_env(images.agent_image))
        box.images.append(image)
        mounts = box.volumes
        reset_verifier_logs(box)
    else:
        image, mounts = images.task_image, []
    runtime.remove(box.agent_container)  # no live agent process exists past this point
    script = (
        f"rm -rf {TESTS} {VERIFIER_LOGS} && mv {STAGED_TESTS} {TESTS} && mkdir -p {VERIFIER_LOGS} "
        f"&& cd {shlex.quote(box.workdir)} 2>/dev/null; "
        f"bash {TESTS}/test.sh >{VERIFIER_LOGS}/test-stdout.txt 2>&1"
    )
    spec = SandboxSpec(
        image=image, name=f"{box.name}-verifier", labels=box.labels("verifier"),
        command=["sh", "-c", script], cpus=environment.cpus, memory_mb=environment.memory_mb,
        pids_limit=environment.pids_limit, network="none", workdir=None, env=verifier.env,
        user=verifier.user, mounts=mounts,
    )
    container = runtime.create(spec)
    box.containers.append(container)
    runtime.put_archive(container, "/", tar_directory(task.path / "tests", STAGED_TESTS.lstrip("/")))
    if verifier.environment_mode == "separate":  # the agent's files, streamed from disk
        if paths.artifacts.is_dir():
            with spool_directory(paths.artifacts, ARTIFACTS.lstrip("/")) as spool:
                runtime.put_archive(container, "/", spool)
        else:
            runtime.put_archive(container, "/", tar_files({}, dirs=["logs/artifacts"]))
        if paths.files.is_dir():
            with spool_directory(paths.files, ".") as spool:
                runtime.put_archive(container, "/", spool)
    if evidence is not None:
        runtime.put_archive(container, "/", tar_files(
            {f"{ARTIFACTS.lstrip('/')}/{EVIDENCE_NAME}": evidence.read_bytes()},
            dirs=["logs", ARTIFACTS.lstrip("/")]))
    if watchdog is not None:
        watchdog.register(container, environment.storage_mb)
    try:
        runtime.start(container)
        result.verifier_limits = read_limits(runtime, container, environment.storage_mb,
                                             "loop-volume+watchdog" if mounts else "watchdog")
        exit_code = runtime.wait(container, verifier.timeout_sec)
    finally:
        if watchdog is not None:
            watchdog.unregister(container)
    if watchdog is not None and watchdog.tripped(container):
        _verifier_failure(result, FailureMode.VERIFIER_ERROR,
                          f"the verifier's writable layer passed storage_mb={environment.storage_mb}")
        exit_code = None
    elif exit_code is None:
        runtime.kill(container)
        _verifier_failure(result, FailureMode.VERIFIER_TIMEOUT,
                          f"test.sh ran past verifier.timeout_sec={verifier.timeout_sec:g}")
    result.verifier_exit_code = exit_code
    stream = runtime.get_archive(container, VERIFIER_LOGS)
    if stream is not None:
        try:
            safe_extract(stream, paths.verifier, cap_bytes=64 * 1024 * 1024, strip_prefix="verifier")
        finally:
            stream.close()
    if exit_code is None:
        return
    try:
        result.reward = read_reward(paths.verifier)
    except RewardError as exc:
        _verifier_failure(result, FailureMode.VERIFIER_ERROR, str(exc))


def _verifier_failure(result: TrialResult, mode: FailureMode, message: str) -> None:
    if result.failure_mode == FailureMode.NONE:
        result.failure_mode = mode
    result.error = f"{result.error}; {message}" if result.error else message
