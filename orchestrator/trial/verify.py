"""Verify (DESIGN 2 step 8): run tests/test.sh in a fresh verifier container with its own
timeout, then read the reward: reward.json (flat map of numbers) first, else reward.txt."""

from __future__ import annotations

import json
import math
import re
import secrets
import shlex
import time
import uuid
from pathlib import Path

from orchestrator.agents import under_timeout
from orchestrator.archive import safe_extract, spool_directories, tar_directory, tar_files
from orchestrator.host import DiskWatchdog
from orchestrator.log import get_logger
from orchestrator.models import (
    Failure,
    FailureMode,
    TrialResult,
    is_wiring,
    verifier_ended,
    verifier_error,
    verifier_timeout,
)
from orchestrator.paths import ARTIFACTS, LOGS, TESTS, VERIFIER_LOGS, TrialDir
from orchestrator.runtime import LABEL_IMAGE_KIND, Runtime
from orchestrator.tasks import HostEnv, Task
from orchestrator.trial import verifier_tools
from orchestrator.trial.collect import copy_out
from orchestrator.trial.hostcopy import stage_tree
from orchestrator.trial.images import TaskImages, verifier_image
from orchestrator.trial.sandbox import (
    Sandbox,
    read_limits,
    require_runtime,
    reset_verifier_logs,
    switch_network,
    verifier_network,
)

STAGED_TESTS = "/.orchestra-tests"
EVIDENCE_NAME = "relay-evidence.json"

MAX_REWARD_FILE = 1024 * 1024
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?\}")

log = get_logger()


class RewardError(ValueError):
    """The verifier left no usable reward; the message says which file and why."""


def _number(value: object, where: str) -> float:
    """A reward value as Harbor's VerifierResult (pydantic, lax) takes it: numbers, bools
    (1.0/0.0) and numeric strings; null, lists, maps and words are errors."""
    if isinstance(value, str):
        text = value
        try:
            value = float(text.strip())
        except ValueError:
            raise RewardError(f"{where}: {text[:80]!r} is not a number") from None
    if not isinstance(value, int | float):
        raise RewardError(f"{where}: {str(value)[:80]!r} is not a number")
    try:
        number = float(value)
    except OverflowError:
        raise RewardError(f"{where}: a number too large for a float") from None
    if not math.isfinite(number):
        raise RewardError(f"{where}: {value!r} is not finite")
    return number


def read_reward(verifier_dir: Path) -> dict[str, float]:
    """reward.json (a flat map, kept as written) wins over reward.txt (one number, as
    `reward`). A map without `reward` is Harbor's too (e.g. correctness + performance): its
    headline is TrialResult.headline's rule."""
    json_path, txt_path = verifier_dir / "reward.json", verifier_dir / "reward.txt"
    if json_path.is_file():
        if json_path.stat().st_size > MAX_REWARD_FILE:
            raise RewardError("reward.json: larger than 1 MB")
        try:
            data = json.loads(json_path.read_text(errors="replace"))
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            raise RewardError(f"reward.json: not JSON ({str(exc)[:200]})") from exc
        if not isinstance(data, dict) or not data:
            raise RewardError("reward.json: expected a non-empty flat map of numbers")
        return {str(k): _number(v, f"reward.json: key {str(k)[:80]!r}") for k, v in data.items()}
    if txt_path.is_file():
        text = txt_path.read_text(errors="replace")[:1000].strip()
        try:
            return {"reward": _number(float(text), "reward.txt")}
        except ValueError as exc:
            if isinstance(exc, RewardError):
                raise
            raise RewardError(f"reward.txt: {text[:80]!r} is not one number") from exc
    raise RewardError("the verifier wrote neither /logs/verifier/reward.json nor reward.txt")


class EnvTemplateError(ValueError):
    """A `${VAR}` in verifier.env with no value on the host and no default."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


def resolve_env(env: dict[str, str], host: HostEnv | None = None) -> dict[str, str]:
    """Harbor's `${VAR}` / `${VAR:-default}` templates in verifier.env. A dataset reads a
    host variable only when the run allows its name (`--task-env`); any other reads as its
    default, else empty, noted in `host`. orchestra's wiring variables are dropped (noted).
    An allowed variable unset on the host without a default is an EnvTemplateError."""
    host = host if host is not None else HostEnv(where="task.toml: ")
    resolved = {}
    for key, value in env.items():
        if is_wiring(key):
            host.notes.append(f"{host.where}verifier.env.{key}: orchestra's wiring variable, "
                              "set by orchestra only: the dataset's value was dropped")
            continue
        match = _TEMPLATE.fullmatch(value)
        if match is None:
            resolved[key] = value
        elif (found := host.get(match.group(1), f"verifier.env.{key}")) is not None:
            resolved[key] = found
        elif match.group(2) is not None:
            resolved[key] = match.group(2)
        elif match.group(1) in host.allowed:
            raise EnvTemplateError(f"verifier.env.{key}",
                                   f"${{{match.group(1)}}} is not set on the host")
        else:
            resolved[key] = ""
    return resolved


def verify(runtime: Runtime, task: Task, images: TaskImages, box: Sandbox,
           paths: TrialDir, result: TrialResult, evidence: Path | None = None,
           watchdog: DiskWatchdog | None = None, keep_alive: bool = False) -> None:
    """Grade the trial with tests/test.sh, /tests arriving only now, /logs/verifier empty.

    - shared (Harbor's default): in the live agent container, after the agent command's
      own process tree has stopped; services the agent started keep running.
    - snapshot: a fresh container from a commit of the stopped agent container.
    - separate: a fresh container from the clean task image with the collected artifacts.
    Fresh containers get the task's quotas (disk through the watchdog), read back; every
    mode gets the verifier's network policy. Only `separate` keeps the agent off the grade.
    """
    mode = task.config.verifier.environment_mode
    result.verifier_forgeable = mode != "separate"
    if mode == "shared":
        _verify_live(runtime, task, box, paths, result, evidence, watchdog, keep_alive)
    else:
        _verify_fresh(runtime, task, images, box, paths, result, evidence, watchdog, keep_alive)


def _command(box: Sandbox, static: bool, staged: str, timeout: float | None = None) -> list[str]:
    """The verifier's command: fresh /tests (moved from where `staged` them), empty
    /logs/verifier, test.sh under bash; `static`: all of it from the host's read-only
    tools (verifier_tools)."""
    shell, util, bash = verifier_tools.wrapper(static)
    run = f"{bash} {TESTS}/test.sh"
    if timeout is not None:  # the live container has no host wait of its own
        run = under_timeout(run, timeout, tool=f"{util}timeout" if static else None)
    # /logs/verifier is renamed away, not removed in place: a process the agent left writing
    # there makes `rm -rf` fail ("Directory not empty"), which once kept the tests from
    # being moved in at all (test.sh: No such file). The tests' move never depends on it.
    old = f"{LOGS}/.orchestra-old-verifier-$$"
    return [*shell, f"{util}rm -rf {TESTS} && {util}mv {staged} {TESTS}; "
                    f"{util}mv {VERIFIER_LOGS} {old} 2>/dev/null; {util}rm -rf {old} 2>/dev/null; "
                    f"{util}mkdir -p {VERIFIER_LOGS}; cd {shlex.quote(box.workdir)} 2>/dev/null; "
                    f"{run} >{VERIFIER_LOGS}/test-stdout.txt 2>&1"]


def _stage_on_disk(task: Task, box: Sandbox) -> str:
    """The task's tests (then a step's own over them) written on the host onto the trial's
    loop disk, under a fresh random name in /logs, for a container with the disk at /logs
    (no engine copy: ~50 ms less per trial); returns where the verifier command moves them
    to /tests from."""
    assert box.loop_disk is not None
    name = f".orchestra-tests-{secrets.token_hex(8)}"
    stage_tree(box.loop_disk.logs, name, list(task.tests_dirs))
    return f"{LOGS}/{name}"


def _stage_by_copy(runtime: Runtime, container: str, task: Task) -> str:
    """The same by archive copies into `container`, at STAGED_TESTS."""
    for folder in task.tests_dirs:
        runtime.put_archive(container, "/", tar_directory(folder, STAGED_TESTS.lstrip("/")))
    return STAGED_TESTS


def _verify_live(runtime: Runtime, task: Task, box: Sandbox, paths: TrialDir,
                 result: TrialResult, evidence: Path | None, watchdog: DiskWatchdog | None,
                 keep_alive: bool) -> None:
    verifier = task.config.verifier
    container = box.agent
    storage = task.config.environment.storage_mb * 1024 * 1024
    if not runtime.is_running(container):  # the agent's end stopped it: its files stay
        runtime.start(container)
        result.verifier_note = ("the agent phase ended abnormally; test.sh ran in the agent's "
                                "container restarted (its files, none of its processes)")
    if watchdog is not None:  # test.sh gets storage_mb of its own on top of what is there
        used = runtime.writable_layer_bytes(box.job).get(container, 0) if watchdog.tripped(
            container) else 0
        watchdog.rearm(container, storage + used)
    result.verifier_limits = read_limits(runtime, container, task.config.environment.storage_mb,
                                         box.storage_enforcement)
    switch_network(runtime, box, task.config.network_for("verifier"), container)
    reset_verifier_logs(box)
    staged = _stage_on_disk(task, box) if container in box.on_disk else \
        _stage_by_copy(runtime, container, task)
    _stage_evidence(runtime, container, evidence)
    started = time.time()
    result.verifier_interpreter = verifier_tools.interpreter_note(box.static_tools)
    host = HostEnv(where="task.toml: ")
    env = resolve_env(verifier.env, host)
    if host.values:  # a secret of the host's is about to be in test.sh's environment
        _stop_agent_processes(runtime, container, box, result)
    outcome = runtime.exec(container, _command(box, box.static_tools, staged, verifier.timeout_sec),
                           env=env, user=verifier.user, deadline=started + verifier.timeout_sec + 10)
    elapsed = time.time() - started
    exit_code = outcome.exit_code
    ended = verifier_ended(disk_tripped=watchdog is not None and watchdog.tripped(container),
                           timed_out=outcome.timed_out, exit_code=exit_code, elapsed=elapsed,
                           timeout=verifier.timeout_sec, storage_mb=task.config.environment.storage_mb)
    if ended is not None:
        _verifier_failure(result, ended)
        exit_code = None
    if not runtime.is_running(container) and exit_code is not None and exit_code != 0:
        runtime.start(container)  # killed mid-grading (disk, OOM): read what test.sh wrote
    _read_outcome(runtime, container, paths, result, exit_code, box)
    if keep_alive:  # the next step runs in this environment, under the agent's policy
        switch_network(runtime, box, task.config.network_for("agent"), container, back=True)
    # else the trial's clean-up removes the container next (a forced removal kills it): a
    # separate kill first cost ~0.1 s per trial


# Every process of the container but its own (PID 1 and, under an init, the command it runs:
# the child of PID 1 that started first, which nothing the agent starts can predate) is
# stopped in one pass (`kill -STOP -1` is one walk of the kernel's process list: nothing forks
# past it), then killed; only shell built-ins, so any image's sh (or the static tools') does.
_STOP_OTHERS = r"""kill -STOP -1 2>/dev/null
main=; first=
read -r init < /proc/1/comm
case "$init" in docker-init|tini|dumb-init|catatonit)
  for p in /proc/[0-9]*; do
    { read -r stat < "$p/stat"; } 2>/dev/null || continue
    set -- ${stat##*) }
    [ "$2" = 1 ] || continue
    if [ -z "$first" ] || [ "${20}" -lt "$first" ]; then first=${20}; main=${p#/proc/}; fi
  done;;
esac
n=0
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  case "$pid" in 1|$$|"$main") continue;; esac
  kill -KILL "$pid" 2>/dev/null && n=$((n+1))
done
[ -n "$main" ] && kill -CONT "$main"
echo "$n"
"""


def _stop_agent_processes(runtime: Runtime, container: str, box: Sandbox, result: TrialResult) -> None:
    """Shared mode with a host secret in verifier.env: no process the agent left behind may
    read it from test.sh's /proc/PID/environ (or send it anywhere), so none survives into
    grading; services the agent started stop with them (said in the result)."""
    shell, _, _ = verifier_tools.wrapper(box.static_tools)
    outcome = runtime.exec(container, [*shell, _STOP_OTHERS], user="root", deadline=time.time() + 30)
    killed = outcome.output.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
    note = (f"verifier.env holds a host variable (--task-env): the agent's {killed[0]} leftover "
            "process(es) were stopped before test.sh, services it started among them")
    result.verifier_note = f"{result.verifier_note}; {note}" if result.verifier_note else note
    log.info("verifier.agent_processes_stopped", container=container[:12], killed=killed[0])


def _verify_fresh(runtime: Runtime, task: Task, images: TaskImages, box: Sandbox,
                  paths: TrialDir, result: TrialResult, evidence: Path | None,
                  watchdog: DiskWatchdog | None, keep_alive: bool = False) -> None:
    """A fresh verifier container; `keep_alive`: a later step still runs in the agent's."""
    verifier = task.config.verifier
    environment = task.config.environment
    if verifier.environment_mode == "snapshot":
        image = runtime.commit(box.agent, f"orchestra/snapshot/{box.trial_id[:16]}",
                               uuid.uuid4().hex[:8],
                               {LABEL_IMAGE_KIND: "snapshot", "orchestra.image.job": box.job},
                               env=runtime.image_facts(images.agent_image).env)
        box.images.append(image)
        mounts = box.volumes
        reset_verifier_logs(box)
    else:  # Harbor's separate: tests/Dockerfile's image when there is one, else the clean task image
        image, source, bases = verifier_image(runtime, task, images.task_image, box.job, box.trust)
        mounts, environment = [], task.config.verifier_environment()
        result.verifier_image = source
        result.bases = [*result.bases, *(b for b in bases if b not in result.bases)]  # once, not per step
    if not keep_alive:
        runtime.remove(box.agent)  # no live agent process exists past this point
    network = verifier_network(box, task.config.network_for("verifier"))
    # snapshot: the agent's filesystem, so the host's static tools run it (if there are
    # any); separate: the clean image's own.
    if verifier.environment_mode == "snapshot":
        tools = verifier_tools.host_tools()
        result.verifier_interpreter = verifier_tools.interpreter_note(bool(tools))
    else:
        tools, result.verifier_interpreter = {}, f"the verifier image's own sh and bash ({source})"
    env = resolve_env(verifier.env)
    if box.egress is not None and task.config.network_for("verifier") == "allowlist":
        assert box.network is not None  # an allowlist's sandbox is on its own network
        box.egress.set_policy("allowlist", task.config.allowed_hosts_for("verifier"))
        env = {**env, **box.egress.env(direct=[box.network.gateway])}  # orchestra's wiring wins
    # snapshot: the tests go onto the loop disk before the container exists; separate: copied in
    staged = _stage_on_disk(task, box) if mounts else STAGED_TESTS
    spec = box.container(
        "verifier", environment, image=image,
        name=f"{box.name}-verifier" + (f"-{re.sub(r'[^a-zA-Z0-9_.-]', '-', task.step)}" if task.step else ""),
        command=_command(box, bool(tools), staged), network=network, env=env, user=verifier.user,
        mounts=mounts, binds=tools)
    container = runtime.create(spec)
    box.containers.append(container)
    if mounts:  # snapshot: the trial's loop disk is /logs here too
        box.on_disk.append(container)
    else:  # separate: the tests and the agent's files, in one copy streamed from disk
        _copy_in_separate(runtime, container, task, paths)
    _stage_evidence(runtime, container, evidence)
    exit_code = _run_fresh(runtime, container, task, box, result, watchdog, environment.storage_mb,
                           "loop-volume+watchdog" if mounts else "watchdog")
    _read_outcome(runtime, container, paths, result, exit_code, box)
    if keep_alive and not runtime.is_running(box.agent):
        runtime.start(box.agent)  # the next step: same files (its processes were stopped)


def _copy_in_separate(runtime: Runtime, container: str, task: Task, paths: TrialDir) -> None:
    """Separate mode: the tests, the collected artifacts and the declared files, in one
    archive streamed from disk."""
    trees = [(folder, STAGED_TESTS.lstrip("/")) for folder in task.tests_dirs]
    if paths.artifacts.is_dir():
        trees.append((paths.artifacts, ARTIFACTS.lstrip("/")))
    if paths.files.is_dir():
        trees.append((paths.files, "."))
    with spool_directories(trees, dirs=[] if paths.artifacts.is_dir() else
                           [ARTIFACTS.lstrip("/")]) as spool:
        runtime.put_archive(container, "/", spool)


def _run_fresh(runtime: Runtime, container: str, task: Task, box: Sandbox, result: TrialResult,
               watchdog: DiskWatchdog | None, storage_mb: int, enforcement: str) -> int | None:
    """Start the verifier under the watchdog, read its limits back, wait out its timeout.
    Returns test.sh's exit code, or None when it was stopped (disk, timeout: said in the
    result)."""
    verifier = task.config.verifier
    if watchdog is not None:
        watchdog.register(container, storage_mb)
    try:
        runtime.start(container)
        result.verifier_limits = read_limits(runtime, container, storage_mb, enforcement)
        require_runtime(runtime, box, container, "verifier", result.verifier_limits.oci_runtime)
        exit_code = runtime.wait(container, verifier.timeout_sec)
    finally:
        if watchdog is not None:
            watchdog.unregister(container)
    if watchdog is not None and watchdog.tripped(container):
        _verifier_failure(result, verifier_error(f"the verifier's writable layer passed storage_mb={storage_mb}"))
        return None
    if exit_code is None:
        runtime.kill(container)
        _verifier_failure(result, verifier_timeout(verifier.timeout_sec))
    return exit_code


def _stage_evidence(runtime: Runtime, container: str, evidence: Path | None) -> None:
    if evidence is not None:
        runtime.put_archive(container, "/", tar_files(
            {f"{ARTIFACTS.lstrip('/')}/{EVIDENCE_NAME}": evidence.read_bytes()},
            dirs=["logs", ARTIFACTS.lstrip("/")]))


def _read_outcome(runtime: Runtime, container: str, paths: TrialDir, result: TrialResult,
                  exit_code: int | None, box: Sandbox) -> None:
    """Copy /logs/verifier out (capped) and read the reward from it."""
    result.verifier_exit_code = exit_code
    stream, _, _ = copy_out(runtime, box, container, VERIFIER_LOGS, 64 * 1024 * 1024)
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
        _verifier_failure(result, verifier_error(str(exc)))


def _verifier_failure(result: TrialResult, failure: Failure) -> None:
    """The first failure's mode stays (the agent's timeout before the verifier's); errors add up."""
    if result.failure_mode == FailureMode.NONE:
        result.failure_mode = failure.mode
    result.error = f"{result.error}; {failure.error}" if result.error else failure.error
