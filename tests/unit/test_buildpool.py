"""Images ahead of trials (job/buildpool.py): planned per task, built longest first in a
bounded pool, a task's trials submitted only once its images exist, a failed build said
once and kept for every trial of the task. Fakes only: no engine."""

from __future__ import annotations

import threading

import pytest
from conftest import make_task

from orchestrator.job.buildpool import BuildPool, dockerfile_cost, plan_images
from orchestrator.job.scheduler import Admission, Item, Scheduler
from orchestrator.models.result import FailureMode, TrialResult
from orchestrator.runtime.base import BuildFailed
from orchestrator.tasks.load import load_task
from orchestrator.trial import imagecache
from orchestrator.trial.imagecache import ImageCache

SLOW = "FROM python:3.12-slim-bookworm\nRUN apt-get update && apt-get install -y gcc\nRUN pip install numpy\n"
QUICK = "FROM python:3.12-slim-bookworm\nWORKDIR /app\n"


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]  # a task loaded alone is named with its parent folder


def _task(tmp_path, name, dockerfile=QUICK, files=None):
    return load_task(make_task(tmp_path, name, dockerfile=dockerfile, files=files))


def test_a_plan_names_every_dockerfile_and_base_its_trials_use(tmp_path):
    task = _task(tmp_path, "t", SLOW, files={
        "tests/Dockerfile": "FROM debian:bookworm-slim\nRUN true\n",
        "task.toml": '[verifier]\nenvironment_mode = "separate"\n'})
    plan = plan_images(task)
    assert [what for what, _ in plan.dockerfiles] == ["task", "verifier"]
    assert plan.bases == ["python:3.12-slim-bookworm", "debian:bookworm-slim"]
    assert plan.estimate > plan_images(_task(tmp_path, "q")).estimate


def test_a_fetching_run_line_weighs_more_than_one_that_does_not():
    assert dockerfile_cost("FROM x\nRUN apt-get install -y gcc\n") > dockerfile_cost("FROM x\nRUN make\n")
    assert dockerfile_cost("FROM x\nRUN make \\\n  && make install\n") == 2.0  # one RUN, continued


def test_builds_start_longest_first_and_each_task_is_ready_exactly_once(tmp_path):
    tasks = [_task(tmp_path, "quick"), _task(tmp_path, "slow", SLOW), _task(tmp_path, "mid",
             "FROM python:3.12-slim-bookworm\nRUN make\n")]
    order, ready = [], []
    pool = BuildPool(lambda t: order.append(_short(t.name)) or 1, workers=1, cancel=threading.Event())
    pool.start(tasks + tasks[:1], ready.append)  # a task named twice is planned once
    pool.stop(timeout=10)
    assert order == ["slow", "mid", "quick"]
    assert sorted(_short(t.name) for t in ready) == ["mid", "quick", "slow"]
    assert [_short(r.task) for r in pool.in_start_order()] == order
    assert all(r.built == 1 and r.error is None for r in pool.records)


def test_no_more_builds_run_at_once_than_the_pool_has_workers(tmp_path):
    tasks = [_task(tmp_path, f"t{i}") for i in range(6)]
    running, peak, guard = [0], [0], threading.Lock()
    release = threading.Event()
    done = threading.Semaphore(0)

    def build(task):
        with guard:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(10)
        with guard:
            running[0] -= 1
        return 0

    pool = BuildPool(build, workers=2, cancel=threading.Event())
    pool.start(tasks, lambda task: done.release())
    threading.Timer(0.3, release.set).start()
    for _ in tasks:
        assert done.acquire(timeout=10)
    assert peak[0] == 2


@pytest.mark.parametrize("error", [BuildFailed("RUN make: exit 2"), RuntimeError("engine gone")])
def test_a_build_that_raises_still_makes_its_task_ready_once_and_is_recorded(tmp_path, error):
    ready = []

    def build(task):
        raise error

    pool = BuildPool(build, workers=2, cancel=threading.Event())
    pool.start([_task(tmp_path, "a")], ready.append)
    pool.stop(timeout=10)
    assert [_short(t.name) for t in ready] == ["a"]
    assert pool.records[0].error is not None and str(error) in pool.records[0].error


def test_a_cancelled_job_builds_nothing_more_but_every_task_is_told(tmp_path):
    cancel = threading.Event()
    cancel.set()
    built, ready = [], []
    pool = BuildPool(lambda t: built.append(t) or 1, workers=1, cancel=cancel)
    pool.start([_task(tmp_path, "a"), _task(tmp_path, "b")], ready.append)
    pool.stop(timeout=10)
    assert built == [] and len(ready) == 2


def test_a_tasks_trials_start_only_after_its_images_exist_and_others_run_meanwhile(tmp_path):
    """Task `slow`'s build waits until task `quick`'s trials have run: quick's trials never
    wait behind it, and none of slow's starts before its build finished."""
    slow, quick = _task(tmp_path, "slow", SLOW), _task(tmp_path, "quick")
    events: list[str] = []
    guard = threading.Lock()
    quick_done = threading.Event()
    cancel = threading.Event()

    def build(task):
        if _short(task.name) == "slow":
            assert quick_done.wait(10)
        with guard:
            events.append(f"built {_short(task.name)}")
        return 1

    def run_one(item):
        with guard:
            events.append(f"trial {_short(item.task.name)}#{item.attempt}")
            if sum(e.startswith("trial quick") for e in events) == 2:
                quick_done.set()
        return TrialResult(trial_id=f"{item.task.name}{item.attempt}", job="j", task=item.task.name,
                           task_path="", content_hash="h", condition="c", condition_hash="h",
                           agent="oracle", policy="memory-on", attempt=item.attempt)

    pool = BuildPool(build, workers=2, cancel=cancel)  # slow's build starts first and waits
    scheduler = Scheduler(2, Admission(4, 8192, cancel), cancel)
    items = [Item(slow, 0), Item(slow, 1), Item(quick, 0), Item(quick, 1)]
    finals = scheduler.run(items, run_one, lambda i: None, lambda r: None, pool.start)
    pool.stop()
    scheduler.stop()
    assert finals == 4
    first_slow_trial = min(i for i, e in enumerate(events) if e.startswith("trial slow"))
    assert events.index("built slow") < first_slow_trial
    assert events.index("trial quick#0") < events.index("built slow")


def test_a_failed_build_is_kept_so_no_trial_of_the_task_builds_it_again(tmp_path, monkeypatch):
    calls = []

    def failing(*args, **kwargs):
        calls.append(_short(args[1].name))
        raise BuildFailed("RUN make: exit 2")

    monkeypatch.setattr(imagecache, "ensure_task_images", failing)
    cache = ImageCache(runtime=None, job="j")  # type: ignore[arg-type]  # never reached: the build fails first
    task = _task(tmp_path, "broken")
    with pytest.raises(BuildFailed):
        cache.ahead(task)
    for _attempt in range(3):  # each trial's build phase
        with pytest.raises(BuildFailed, match="RUN make: exit 2"):
            cache(task)
    assert calls == ["broken"]
    assert FailureMode.BUILD_ERROR.value == "build_error"


def test_a_free_slot_takes_the_ready_trial_first_in_the_jobs_order_not_the_first_built(tmp_path):
    """The job's order (longest first) holds among ready trials: `b` was ready before `a`,
    but `a` comes first in the job's order, so the slot `c` frees takes `a`."""
    a, b, c = (_task(tmp_path, name) for name in "abc")
    cancel = threading.Event()
    started: list[str] = []
    c_running, both_ready = threading.Event(), threading.Event()

    def run_one(item):
        started.append(_short(item.task.name))
        if _short(item.task.name) == "c":
            c_running.set()
            assert both_ready.wait(10)
        return TrialResult(trial_id=item.task.name, job="j", task=item.task.name, task_path="",
                           content_hash="h", condition="c", condition_hash="h", agent="oracle",
                           policy="memory-on", attempt=item.attempt)

    def images_ready(tasks, then):
        by_name = {_short(t.name): t for t in tasks}
        then(by_name["c"])

        def later():
            assert c_running.wait(10)
            then(by_name["b"])
            then(by_name["a"])
            both_ready.set()
        threading.Thread(target=later).start()

    scheduler = Scheduler(1, Admission(4, 8192, cancel), cancel)
    assert scheduler.run([Item(a, 0), Item(b, 0), Item(c, 0)], run_one, lambda i: None,
                         lambda r: None, images_ready) == 3
    scheduler.stop()
    assert started == ["c", "a", "b"]


def test_warm_tasks_are_taken_in_the_jobs_order_by_a_thread_of_their_own(tmp_path):
    tasks = [_task(tmp_path, "quick"), _task(tmp_path, "slow", SLOW), _task(tmp_path, "cold", SLOW)]
    warm_order, ready = [], []
    guard = threading.Lock()

    def build(task):
        with guard:
            if threading.current_thread().name.startswith("build-warm"):
                warm_order.append(_short(task.name))
        return 0

    pool = BuildPool(build, workers=1, cancel=threading.Event(),
                     likely_built=lambda t: _short(t.name) != "cold")
    plans = pool.start(tasks, ready.append)
    pool.stop(timeout=10)
    assert [_short(p.task.name) for p in plans] == ["cold"]  # the one to build
    assert warm_order == ["quick", "slow"]  # the job's order, not longest first
    assert len(ready) == 3


def test_an_engine_failure_building_ahead_is_not_kept_the_trial_builds_itself(tmp_path, monkeypatch):
    """A stale engine error is never raised into a trial that starts after the engine came
    back (the engine-500s and dockerd-restart cases lost trials that way): the trial builds."""
    from orchestrator.trial.images import TaskImages

    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("the engine failed during the build")
        return TaskImages(task_image="t:1", agent_image="a:1", built=2)

    monkeypatch.setattr(imagecache, "ensure_task_images", flaky)
    monkeypatch.setattr(imagecache, "touch_images", lambda refs: None)  # no host record of use
    cache = ImageCache(runtime=None, job="j")  # type: ignore[arg-type]  # never reached: faked
    task = _task(tmp_path, "cut")
    with pytest.raises(ConnectionError):
        cache.ahead(task)
    assert cache(task).agent_image == "a:1"  # the first trial builds, no stale error raised
    assert cache(task).agent_image == "a:1"  # built once: the next trial finds it
    assert len(calls) == 2


APT = "FROM python:3.12-slim\n# a comment\nRUN apt-get update && \\\n    apt-get install -y ca-certificates\n"


def test_dockerfiles_that_begin_alike_share_their_run_steps_up_to_the_first_copy():
    from orchestrator.job.buildpool import shared_steps

    a = shared_steps(APT + "RUN pip install pytest==8.4.1\nCOPY data /app/data\nRUN make\n")
    b = shared_steps(APT.replace("# a comment\n", "\n") + "RUN pip install pytest==8.4.1\nRUN true\n")
    c = shared_steps(APT + "RUN pip install numpy\n")
    d = shared_steps(APT.replace("3.12-slim", "3.13-slim"))
    assert len(a) == 2 and a == b[:2] and len(b) == 3  # comments, blank lines, continuations: no matter
    assert c[0] == a[0] and c[1] != a[1]  # the same apt step, a different pip step
    assert not set(d) & set(a)  # another FROM: nothing in common
    assert shared_steps("FROM a AS build\nRUN make\nFROM b\nRUN make\n") == \
        shared_steps("FROM a AS build\nRUN make\n")  # the first stage only


def _recording_build(guard, running, log, release=None):
    def build(task):
        name = _short(task.name)
        with guard:
            running.add(name)
            log.append(sorted(running))
        if release is not None:
            release.wait(0.2)  # keep it running long enough for another builder to look
        with guard:
            running.discard(name)
        return 1
    return build


def test_two_builds_sharing_an_unbuilt_run_step_never_run_at_once_the_other_waits_for_the_cache(tmp_path):
    """`a1` and `a2` begin alike (same FROM, same apt and pip steps): `a2` starts only once
    `a1` is built and records the two steps it found built; `b`, which shares nothing
    pending, builds beside `a1` meanwhile."""
    same = APT + "RUN pip install pytest==8.4.1\n"
    tasks = [_task(tmp_path, "a1", same), _task(tmp_path, "a2", same),
             _task(tmp_path, "b", "FROM python:3.12-slim\nRUN pip install numpy\n")]
    guard, running, seen = threading.Lock(), set(), []
    pool = BuildPool(_recording_build(guard, running, seen, threading.Event()), workers=2,
                     cancel=threading.Event())
    ready = []
    pool.start(tasks, ready.append)
    pool.stop(timeout=10)
    assert len(ready) == 3
    assert not any({"a1", "a2"} <= set(now) for now in seen)  # never side by side
    assert ["a1", "b"] in seen  # b beside a1
    by_task = {_short(r.task): r for r in pool.records}
    assert by_task["a2"].started_at >= by_task["a1"].finished_at
    assert (by_task["a1"].shared_steps, by_task["a2"].shared_steps, by_task["b"].shared_steps) == (0, 2, 0)


def test_a_failed_build_does_not_count_its_steps_as_built(tmp_path):
    """The leader's build fails: the follower still runs (after it), counting nothing as
    found built."""
    same = APT + "RUN pip install pytest==8.4.1\n"
    tasks = [_task(tmp_path, "a1", same), _task(tmp_path, "a2", same)]

    def build(task):
        if _short(task.name) == "a1":
            raise BuildFailed("RUN apt-get update: exit 100")
        return 1

    pool = BuildPool(build, workers=2, cancel=threading.Event())
    pool.start(tasks, lambda t: None)
    pool.stop(timeout=10)
    by_task = {_short(r.task): r for r in pool.records}
    assert by_task["a1"].error and by_task["a2"].error is None
    assert by_task["a2"].shared_steps == 0 and by_task["a2"].started_at >= by_task["a1"].finished_at


def test_a_dockerfile_of_tens_of_thousands_of_run_lines_is_planned_in_one_pass(tmp_path):
    """A hostile dataset's Dockerfile: every RUN a key, each from one running hash (hashing
    each prefix anew was quadratic: 20,000 lines of 100 bytes, ~20 GB hashed)."""
    import time

    from orchestrator.job.buildpool import shared_steps

    text = "FROM python:3.12-slim\n" + "".join(f"RUN echo {i} {'x' * 100}\n" for i in range(20_000))
    started = time.monotonic()
    keys = shared_steps(text)
    assert len(keys) == len(set(keys)) == 20_000
    assert shared_steps(text.replace("RUN echo 19999", "RUN echo other"))[:-1] == keys[:-1]
    # hang guard only (the quadratic form took minutes): not a timing target
    assert time.monotonic() - started < 30
