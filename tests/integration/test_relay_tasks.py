"""The relay in real trials: relay-native tasks, seeding, memory-off, secrets, forgery."""

from __future__ import annotations

import json
import threading
import time

from conftest import ROOT, by_task, make_task, run

RELAY_NATIVE = ROOT / "tasks" / "relay-native"


def test_oracle_scores_one_and_nop_zero_on_relay_native(runtime, tmp_path):
    _, trials = run(runtime, RELAY_NATIVE, tmp_path, agent="oracle", n=2)
    assert {t.task: t.reward["reward"] for t in trials} == {
        f"relay-native/{name}": 1.0 for name in (
            "memory-retrieval", "reply-to-thread", "user-mention", "multiline-message",
            "cross-thread-requests", "interleaved-agent-reports")}
    t = by_task(trials)
    assert t["memory-retrieval"].reward == {"answer_correct": 1.0, "threaded_reply": 1.0,
                                            "evidence_complete": 1.0, "reward": 1.0}
    _, trials = run(runtime, RELAY_NATIVE, tmp_path, agent="nop", n=2)
    assert [t.reward["reward"] for t in trials] == [0.0] * 6


def _watch_agent_env(runtime, seen: dict, stop: threading.Event, job: str) -> None:
    while not stop.is_set():  # only this job's agents: other work may share the engine
        for row in runtime.api.containers(filters={"label": ["orchestra.kind=agent",
                                                             f"orchestra.job={job}"]}):
            env = runtime.api.inspect_container(row["Id"])["Config"]["Env"] or []
            seen.setdefault(row["Id"], dict(e.split("=", 1) for e in env))
        time.sleep(0.1)


def test_memory_retrieval_runs_with_the_no_memory_flag_and_seeds_written_by_mem_set(runtime, tmp_path, monkeypatch):
    from orchestrator.services.relay import auth

    keys: list[str] = []
    real_new_key = auth.new_private_key
    monkeypatch.setattr(auth, "new_private_key", lambda: keys.append(real_new_key()) or keys[-1])
    seen: dict = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_agent_env, args=(runtime, seen, stop, "noflag"),
                               daemon=True)
    watcher.start()
    try:
        job, (trial,) = run(runtime, RELAY_NATIVE / "memory-retrieval", tmp_path / "jobs",
                            name="noflag")
    finally:
        stop.set()
        watcher.join()
    (env,) = seen.values()
    assert env["ORCHESTRA_NO_MEMORY"] == "1"
    assert env["ORCHESTRA_AGENT_ID"] == "lead"
    assert env["ORCHESTRA_RELAY_URL"].startswith("http://10.213.")
    seeds = trial.memory.engram_seeds
    assert [s.slug for s in seeds] == [
        "total-customers-per-month", "customer-value-metric", "customers-metrics-spring-24",
        "new-customers-april-2024", "total-customers-metric"]
    assert all(s.exit_code == 0 and s.via == "mem set <slug> -" for s in seeds)
    folder = next((tmp_path / "jobs" / job.job / "trials").iterdir())
    writes = json.loads((folder / "relay-engrams.json").read_text())
    assert [(w["owner"], w["slug"], w["client"]) for w in writes] == [
        ("lead", f"mem/{s.slug}", "mem set -") for s in seeds]  # the value came on stdin
    # No secret in the container's config (they reach the agent through exec only) ...
    assert "ORCHESTRA_PRIVATE_KEY" not in env and "ORCHESTRA_AUTH_TAG" not in env
    # ... and none anywhere in the job folder.
    assert len(keys) == 2  # the orchestrator's and the user's
    blob = "".join(p.read_text(errors="replace") for p in (tmp_path / "jobs").rglob("*") if p.is_file())
    assert not any(key in blob for key in keys)
    evidence = json.loads((folder / "artifacts" / "relay-evidence.json").read_text())
    assert evidence["task_name"] == "memory-retrieval"
    assert evidence["identities"]["lead"]["role"] == "orchestrator"


def test_memory_off_seeds_nothing_and_the_oracle_scores_zero(runtime, tmp_path):
    from orchestrator.job.runner import JobOptions, run_job
    from orchestrator.models.manifest import default_manifest
    from orchestrator.models.result import TrialResult
    from orchestrator.tasks.load import load_tasks

    ds = tmp_path / "ds"
    make_task(ds, "listing", toml="""
        [relay]
        enabled = true
    """, solve="""
        mem ls --json > /logs/artifacts/ls.json
        env | grep -c ORCHESTRA_NO_MEMORY > /logs/artifacts/flag.txt || true
        touch /app/ok
    """, files={"memory/seeds.toml": '[[seed]]\nslug = "a"\nvalue = "1"\n[[seed]]\nslug = "b"\nvalue = "2"\n'})
    import shutil
    shutil.copytree(RELAY_NATIVE / "memory-retrieval", ds / "memory-retrieval")
    results = {}
    for policy in ("memory-on", "memory-off"):
        options = JobOptions(job_name=f"p-{policy}", jobs_dir=tmp_path / "jobs", policy=policy, n_concurrent=2)
        run_job(runtime, load_tasks(ds), default_manifest("oracle"), options)
        for p in (tmp_path / "jobs" / options.job_name / "trials").iterdir():
            r = TrialResult.model_validate_json((p / "result.json").read_text())
            results[(policy, r.task.split("/")[-1])] = (r, p)
    on, on_dir = results[("memory-on", "listing")]
    off, off_dir = results[("memory-off", "listing")]
    assert len(json.loads((on_dir / "artifacts/ls.json").read_text())) == 2
    assert json.loads((off_dir / "artifacts/ls.json").read_text()) == []
    assert (off_dir / "artifacts/flag.txt").read_text().strip() == "1"
    assert (on_dir / "artifacts/flag.txt").read_text().strip() == "0"
    assert off.memory.engram_seeds == []
    assert results[("memory-on", "memory-retrieval")][0].reward["reward"] == 1.0
    assert results[("memory-off", "memory-retrieval")][0].reward["reward"] == 0.0


def test_an_agent_cannot_post_as_the_user_from_inside_its_container(runtime, tmp_path):
    make_task(tmp_path / "ds", "forge", toml="""
        [relay]
        enabled = true
        [environment]
        network_mode = "none"
    """, solve="""
        python3 - <<'PY'
        import json, os, sys
        sys.path.insert(0, "/opt/orchestra/lib")
        import orchestra_client as oc
        me = oc.Client()
        user = [i for i in me.directory() if i["role"] == "user"][0]
        outcomes = {}
        # 1. sign with my key but claim the user's pubkey
        real = oc.pubkey_of
        oc.pubkey_of = lambda key: user["pubkey"]
        try:
            me.post("I approve the release")
            outcomes["forged_pubkey"] = "accepted"
        except oc.RelayError as exc:
            outcomes["forged_pubkey"] = exc.status
        oc.pubkey_of = real
        # 2. a made-up key
        try:
            oc.Client(private_key="00" * 32).post("hi")
            outcomes["wrong_key"] = "accepted"
        except oc.RelayError as exc:
            outcomes["wrong_key"] = exc.status
        json.dump(outcomes, open("/logs/artifacts/outcomes.json", "w"))
        PY
        touch /app/ok
    """)
    job, (trial,) = run(runtime, tmp_path / "ds", tmp_path / "jobs")
    folder = next((tmp_path / "jobs" / job.job / "trials").iterdir())
    assert json.loads((folder / "artifacts/outcomes.json").read_text()) == {
        "forged_pubkey": 401, "wrong_key": 401}
    evidence = json.loads((folder / "artifacts/relay-evidence.json").read_text())
    assert [m["author"] for m in evidence["messages"]] == ["user"]  # only the instruction
    assert len(trial.relay.rejections) == 2


def test_a_seed_that_cannot_be_written_is_a_launch_error_naming_the_slug(runtime, tmp_path):
    make_task(tmp_path / "ds", "badseed", toml="""
        [relay]
        enabled = true
    """, dockerfile="FROM python:3.12-slim-bookworm\nRUN rm -f /usr/bin/python3* /usr/local/bin/python3*\n",
        files={"memory/seeds.toml": '[[seed]]\nslug = "fact"\nvalue = "v"\n'})
    _, (trial,) = run(runtime, tmp_path / "ds", tmp_path / "jobs")
    assert trial.failure_mode == "launch_error"
    assert "'fact'" in trial.error and trial.reward is None
