#!/usr/bin/env python3
"""make test-models: every installed agent on the real local model server, through
`orchestra run`, with a meter between the proxy and the server.

For each agent (default: every one orchestra supports whose CLI is installed) it runs
tasks/examples/hello-file and tasks/memorybench/mb-exact (copied into one dataset; the copy
of mb-exact declares 1024 MB instead of 512, as Qwen Code and OpenHands refuse less) on the
server `make local-model` started (endpoints/local.json), one trial at a time, under a
manifest like manifests/solo-local.yaml with a trial deadline long enough for a CPU server.

The meter is a byte-for-byte relay in this process between orchestra's model proxy and the
server: it changes nothing, and writes what the server itself said about each call (status,
whether it streamed, whether stream_options.include_usage was asked, the usage it reported,
if any) to the job's `upstream.jsonl`. The table printed at the end puts those counts beside
what orchestra recorded in each trial's result.json.

    .venv/bin/python scripts/test-models.py                   # every installed agent
    .venv/bin/python scripts/test-models.py --agent reference --task hello-file
    .venv/bin/python scripts/test-models.py --record tests/fixtures/llamacpp-agents

`--record DIR` copies each job as `orchestra run --replay-from` reads it (the trials'
model/exchanges.jsonl, result.json cut to task and attempt) with the meter's upstream.jsonl,
the manifest, and live.json (what the live trial ended with) into DIR/<agent>/.
Exit code: 0 when every trial ran and ended by the agent or its deadline (whatever its
reward), 1 when one ended otherwise (an infrastructure, proxy or translation error).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
AGENTS = ["reference", "mini-swe-agent", "aider", "opencode", "claude-code", "codex", "gemini-cli",
          "qwen-code", "openhands", "acp-opencode", "acp-qwen-code"]
TASKS = {"hello-file": ROOT / "tasks/examples/hello-file", "mb-exact": ROOT / "tasks/memorybench/mb-exact"}
# what ends a trial by the agent or its deadline (anything else is the harness's failure)
AGENT_ENDS = {"ok", "timeout", "step_limit", "budget_exceeded"}


def manifest(timeout: float) -> dict[str, Any]:
    return {
        "schema_version": 1, "condition": "test-models",
        "roster": [{
            "id": "lead", "kind": "orchestrator", "role": "solver", "agent": "reference",
            "endpoint": "local",
            "generation": {"temperature": 0.0, "max_output_tokens": 512, "max_turns": 12},
            # mini-swe-agent's text mode and OpenHands' tools in the prompt: llama.cpp's
            # server fills no tool_calls for this model (README, OpenHands)
            "env": {"MSWEA_CONFIG": "mini_textbased.yaml", "LLM_NATIVE_TOOL_CALLING": "false"},
            "budget": {"max_calls": 16},
            "flags": {"no_memory": {"ORCHESTRA_NO_MEMORY": "1"}},
        }],
        "trial_budget": {"timeout_seconds": timeout},
        "prices": {"qwen2.5-coder-0.5b-instruct": {"input": 0.0, "output": 0.0}},
    }


# ---- the meter --------------------------------------------------------------------------
class Meter(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str):
        url = urllib.parse.urlsplit(upstream)
        self.host, self.port_up = url.hostname or "127.0.0.1", url.port or 80
        self.prefix = url.path.rstrip("/")[: -len("/v1")] if url.path.rstrip("/").endswith("/v1") else ""
        self.lock = threading.Lock()
        self.records: list[dict[str, Any]] = []
        self.in_flight = 0
        self.prompts: dict[str | None, int] = {}  # the server's count for these messages
        super().__init__(("127.0.0.1", 0), _MeterHandler)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def take(self) -> list[dict[str, Any]]:
        for _ in range(100):  # a call whose answer was sent is written down just after
            with self.lock:
                if not self.in_flight:
                    break
            time.sleep(0.1)
        with self.lock:
            records, self.records = self.records, []
        return records


SERVER_LOG = Path(os.environ.get("ORCHESTRA_LOCAL_MODEL_DIR", Path.home() / ".cache/orchestra/local-model")) / "server.log"


def log_size() -> int:
    try:
        return SERVER_LOG.stat().st_size
    except OSError:
        return 0


def counted_by_server(body: bytes, log_from: int, log_to: int) -> dict[str, Any] | None:
    """A stream the server sent no usage for, as the server itself counted it: the prompt
    from its log while it answered (llama-cpp-python's `Llama.generate: N prefix-match hit,
    remaining M prompt tokens`, else `prompt eval time = ... / N tokens`), the completion
    as the token chunks it streamed (one chunk a generated token: on this server their
    number equals the usage it reports for the same call unstreamed)."""
    import re

    try:
        with SERVER_LOG.open("rb") as log:
            log.seek(log_from)
            text = log.read(max(0, log_to - log_from)).decode(errors="replace")
    except OSError:
        return None
    hit = re.findall(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens", text)
    evals = re.findall(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", text)
    cached = "full prompt already cached" in text  # the same prompt again: evaluated 0 (or 1)
    if len(hit) + len(evals) == 0:
        return None
    prompt = None if cached and not hit else int(hit[-1][0]) + int(hit[-1][1]) if hit else int(evals[-1])
    chunks = 0
    for line in body.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        try:
            choices = json.loads(line[6:]).get("choices") or [{}]
        except ValueError:
            continue
        delta = choices[0].get("delta") or {}
        chunks += bool(delta.get("content") or delta.get("tool_calls"))
    return {"prompt_tokens": prompt, "completion_tokens": chunks,
            "requests_in_log": max(len(hit), len(evals))}


def _usage_of(body: bytes, stream: bool) -> dict[str, Any] | None:
    if not stream or body.lstrip()[:1] == b"{":  # a whole answer (also to a stream asked for)
        try:
            usage = json.loads(body).get("usage")
        except (ValueError, AttributeError):
            return None
        return usage if isinstance(usage, dict) else None
    found = None
    for line in body.split(b"\n"):
        if line.startswith(b"data:") and b'"usage"' in line:
            try:
                usage = json.loads(line[5:]).get("usage")
            except (ValueError, AttributeError):
                continue
            if isinstance(usage, dict):
                found = usage
    return found


def messages_sha(request: object) -> str | None:
    """What ties a call the server answered to the trial's record of it (the messages)."""
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        return None
    return hashlib.sha256(json.dumps(request["messages"], sort_keys=True).encode()).hexdigest()[:16]


def calls_of(folder: Path, upstream: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The server's answers to this trial's calls: those whose messages the trial's
    exchanges record holds (a retried call is there once per attempt)."""
    path = folder / "model/exchanges.jsonl"
    keys = {messages_sha(json.loads(line).get("request")) for line in path.read_text().splitlines()} \
        if path.is_file() else set()
    return [r for r in upstream if r.get("messages_sha") in keys - {None}]


class _MeterHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Meter

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._relay(b"")

    def do_POST(self) -> None:  # noqa: N802
        self._relay(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _relay(self, body: bytes) -> None:
        started = time.time()
        try:
            request = json.loads(body) if body else {}
        except ValueError:
            request = {}
        stream = bool(isinstance(request, dict) and request.get("stream"))
        record: dict[str, Any] = {
            "started": round(started, 3), "path": self.path, "stream": stream,
            "include_usage_asked": bool(isinstance(request, dict) and isinstance(
                request.get("stream_options"), dict) and request["stream_options"].get("include_usage")),
            "max_tokens": request.get("max_tokens") if isinstance(request, dict) else None,
            "messages_sha": messages_sha(request)}
        upstream = http.client.HTTPConnection(self.server.host, self.server.port_up, timeout=3600)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
        seen = b""
        log_from = log_size()
        with self.server.lock:
            self.server.in_flight += 1
        try:
            upstream.request(self.command, self.server.prefix + self.path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            record["status"] = answer.status
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(key, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            while True:
                chunk = answer.read1(65536)
                if not chunk:
                    break
                if len(seen) < 64 * 1024 * 1024:
                    seen += chunk
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (OSError, http.client.HTTPException) as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            upstream.close()
            self.close_connection = True
        record["seconds"] = round(time.time() - started, 3)
        record["bytes"] = len(seen)
        if self.command == "POST":
            record["usage"] = _usage_of(seen, stream)
            if record["usage"] is None and seen[:1] == b"{":
                record["body_head"] = seen[:300].decode(errors="replace")
            elif record["usage"] is None and record.get("status") == 200:
                record["server_log"] = [log_from, log_size()]
                counted = counted_by_server(seen, *record["server_log"])
                if counted is not None and counted["prompt_tokens"] is None:  # its prompt as last time
                    counted["prompt_tokens"] = self.server.prompts.get(record["messages_sha"])
                    counted["note"] = "full prompt already cached: the count of its previous call"
                record["server_counted"] = counted
            prompt = (record.get("usage") or record.get("server_counted") or {}).get("prompt_tokens")
            if prompt is not None:
                self.server.prompts[record["messages_sha"]] = prompt
        with self.server.lock:
            self.server.in_flight -= 1
            if self.command == "POST":
                self.server.records.append(record)


# ---- the runs ---------------------------------------------------------------------------
def installed(agent: str) -> bool:
    if agent == "reference":
        return True
    from orchestrator.agents.installed import INSTALLED

    name = {"acp-opencode": "opencode", "acp-qwen-code": "qwen-code"}.get(agent, agent)
    return name in INSTALLED and INSTALLED[name].is_installed()


def dataset(folder: Path, task: str) -> Path:
    """One task in a dataset folder named `ds` (a replayed trial is matched by its task's
    name, `ds/hello-file`; mb-exact names itself memorybench/mb-exact)."""
    ds = folder / f"ds-{task}" / "ds"
    if ds.exists():
        shutil.rmtree(ds)
    shutil.copytree(TASKS[task], ds / task)
    toml = ds / task / "task.toml"
    if task == "mb-exact":  # Qwen Code and OpenHands refuse under 1024 MB
        toml.write_text(toml.read_text().replace("memory_mb = 512", "memory_mb = 1024"))
    return ds


def server_version(upstream: str) -> str:
    venv = Path(os.environ.get("ORCHESTRA_LOCAL_MODEL_DIR", Path.home() / ".cache/orchestra/local-model")) / "venv"
    try:
        out = subprocess.run([str(venv / "bin/python"), "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError:
        out = ""
    return f"llama-cpp-python {out}" if out else "unknown"


def run_agent(agent: str, task: str, work: Path, meter: Meter, timeout: float,
              local: dict[str, Any]) -> tuple[Path, float, int]:
    ds = dataset(work, task)
    endpoints = work / "endpoints.json"  # the endpoint as configured, at the meter
    endpoints.write_text(json.dumps({"local": {**local, "base_url": meter.base_url}}))
    man = work / "manifest.yaml"
    man.write_text(json.dumps(manifest(timeout), indent=1))
    name = f"models-{agent}-{task}"
    job = work / "jobs" / name
    if job.exists():
        shutil.rmtree(job)
    started = time.time()
    log = (work / f"{name}.log").open("w")
    code = subprocess.call([ORCHESTRA, "run", "--path", str(ds), "--manifest", str(man), "--agent", agent,
                            "--endpoint-config", str(endpoints), "--jobs-dir", str(work / "jobs"),
                            "--job-name", name, "--n-concurrent", "1", "--max-retries", "0",
                            "--order", "given"], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    log.close()
    (job / "upstream.jsonl").write_text("".join(json.dumps(r) + "\n" for r in meter.take()))
    return job, time.time() - started, code


def rows_of(agent: str, job: Path, seconds: float, code: int) -> list[dict[str, Any]]:
    upstream = [json.loads(x) for x in (job / "upstream.jsonl").read_text().splitlines()]
    rows = []
    trials = sorted((job / "trials").iterdir()) if (job / "trials").is_dir() else []
    for folder in trials:
        try:
            result = json.loads((folder / "result.json").read_text())
        except (OSError, ValueError):
            continue
        mine = [r for r in calls_of(folder, upstream) if "chat/completions" in r["path"]]
        counted = [r.get("usage") or r.get("server_counted") or {} for r in mine]  # prompt None: unknown
        model = result.get("model") or {}
        reward = (result.get("reward") or {}).get("reward")
        rows.append({
            "agent": agent, "task": result["task"].split("/")[-1], "reward": reward,
            "agent_outcome": result.get("agent_outcome"), "failure_mode": result.get("failure_mode"),
            "exit": result.get("agent_exit_code"), "calls": model.get("calls", 0),
            "upstream_calls": len(mine), "upstream_streamed": sum(r["stream"] for r in mine),
            "include_usage_asked": sum(r["include_usage_asked"] for r in mine),
            "usage_reported": sum(bool(r.get("usage")) for r in mine),
            "server_counted": sum(bool(r.get("server_counted")) for r in mine),
            "upstream_prompt": sum(int(u.get("prompt_tokens") or 0) for u in counted),
            "upstream_completion": sum(int(u.get("completion_tokens") or 0) for u in counted),
            "recorded_prompt": model.get("prompt_tokens", 0),
            "recorded_completion": model.get("completion_tokens", 0),
            "upstream_errors": [f"{r.get('status')} {r.get('error') or r.get('body_head', '')}"[:200]
                                for r in mine if r.get("status") != 200 or r.get("error")],
            "last_error": (model.get("last_error") or "")[:300], "error": (result.get("error") or "")[:300],
            "agent_seconds": round((result.get("timings") or {}).get("agent", 0.0), 1),
            "trial_seconds": round(result.get("finished_at", 0) - result.get("started_at", 0), 1),
            "folder": str(folder), "orchestra_exit": code, "job_seconds": round(seconds, 1)})
    if not rows:
        rows.append({"agent": agent, "task": "-", "reward": None, "agent_outcome": None,
                     "failure_mode": f"no trial (orchestra run exit {code}, log {job.parent.parent}/{job.name}.log)",
                     "folder": str(job), "orchestra_exit": code, "job_seconds": round(seconds, 1)})
    return rows


def record(agent: str, job: Path, into: Path, version: str, rows: list[dict[str, Any]],
           dialect: dict[str, Any]) -> None:
    """Adds this job's trials to into/<agent> (a trial of the same task there is replaced)."""
    import yaml

    target = into / agent
    (target / "trials").mkdir(parents=True, exist_ok=True)
    lineup = json.loads((job.parent.parent / "manifest.yaml").read_text())
    lineup["roster"][0]["agent"] = agent  # what --agent ran
    (target / "manifest.yaml").write_text(yaml.safe_dump(lineup, sort_keys=False))
    before = json.loads((target / "live.json").read_text())["trials"] if (target / "live.json").is_file() else []
    tasks = {row["task"] for row in rows}
    live = [t for t in before if t["task"] not in tasks]
    for row in rows:
        folder = Path(row["folder"])
        if not (folder / "result.json").is_file():
            continue
        result = json.loads((folder / "result.json").read_text())
        task = row["task"]
        out = target / "trials" / task
        if out.exists():
            shutil.rmtree(out)
        (out / "model").mkdir(parents=True)
        if (folder / "model/exchanges.jsonl").is_file():
            shutil.copy(folder / "model/exchanges.jsonl", out / "model/exchanges.jsonl")
        (out / "result.json").write_text(json.dumps({"task": result["task"], "attempt": result["attempt"]}) + "\n")
        upstream = calls_of(folder, [json.loads(x) for x in (job / "upstream.jsonl").read_text().splitlines()])
        (out / "upstream.jsonl").write_text("".join(json.dumps(r) + "\n" for r in upstream))
        model = result.get("model") or {}
        day = datetime.fromtimestamp(result.get("started_at", 0), UTC).strftime("%Y-%m-%d")
        live.append({"task": task, "recorded": day, "endpoint": dialect, "reward": (result.get("reward") or {}).get("reward"),
                     "agent_outcome": result.get("agent_outcome"), "failure_mode": result.get("failure_mode"),
                     "agent_exit_code": result.get("agent_exit_code"), "calls": model.get("calls", 0),
                     "prompt_tokens": model.get("prompt_tokens", 0),
                     "completion_tokens": model.get("completion_tokens", 0),
                     "upstream_prompt_tokens": row["upstream_prompt"],
                     "upstream_completion_tokens": row["upstream_completion"],
                     "usage_reported": row["usage_reported"], "server_counted": row["server_counted"],
                     "upstream_calls": row["upstream_calls"],
                     "agent_seconds": row["agent_seconds"]})
    (target / "live.json").write_text(json.dumps({
        "agent": agent, "server": version, "model": "qwen2.5-coder-0.5b-instruct (Q4 GGUF)",
        "trials": sorted(live, key=lambda t: t["task"])}, indent=1) + "\n")


def table(rows: list[dict[str, Any]]) -> str:
    head = ("agent", "task", "reward", "outcome", "failure", "calls", "up calls", "usage sent (log)",
            "tokens upstream (p+c)", "tokens recorded (p+c)", "agent s")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "calls" not in r:
            lines.append(f"| {r['agent']} | - | - | - | {r['failure_mode']} |" + " - |" * 6)
            continue
        equal = (r["upstream_prompt"], r["upstream_completion"]) == (r["recorded_prompt"], r["recorded_completion"])
        lines.append("| " + " | ".join(str(x) for x in (
            r["agent"], r["task"], r["reward"], r["agent_outcome"], r["failure_mode"], r["calls"],
            f"{r['upstream_calls']} ({r['upstream_streamed']} streamed)",
            f"{r['usage_reported']}/{r['upstream_calls']} ({r['server_counted']})",
            f"{r['upstream_prompt']}+{r['upstream_completion']}",
            f"{r['recorded_prompt']}+{r['recorded_completion']}" + ("" if equal else " (differs)"),
            r["agent_seconds"])) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agent", action="append", choices=AGENTS, help="repeatable (default: every installed one)")
    parser.add_argument("--task", action="append", choices=list(TASKS), help="repeatable (default: both)")
    parser.add_argument("--endpoints", type=Path, default=ROOT / "endpoints/local.json")
    parser.add_argument("--work", type=Path, default=ROOT / "jobs" / f"test-models-{datetime.now(UTC):%Y%m%d-%H%M%S}")
    parser.add_argument("--timeout", type=float, default=600.0, help="each trial's agent deadline, seconds")
    parser.add_argument("--record", type=Path, help="copy each job here as a replayable recording")
    args = parser.parse_args()
    local = json.loads(args.endpoints.read_text())["local"]
    upstream = local["base_url"]
    try:
        with urllib.request.urlopen(upstream.rstrip("/") + "/models", timeout=10) as answer:
            answer.read()
    except urllib.error.HTTPError:
        pass  # it answered
    except OSError as exc:
        print(f"test-models: no model server answers at {upstream} ({exc}): run `make local-model`", file=sys.stderr)
        return 2
    agents = args.agent or [a for a in AGENTS if installed(a)]
    missing = [a for a in AGENTS if a not in agents and not installed(a)]
    version = server_version(upstream)
    args.work.mkdir(parents=True, exist_ok=True)
    meter = Meter(upstream)
    threading.Thread(target=meter.serve_forever, daemon=True).start()
    dialect = {k: v for k, v in local.items() if k not in ("provider", "base_url", "model", "env")}
    print(f"test-models: {version} at {upstream} ({json.dumps(dialect)}), metered at {meter.base_url}; "
          f"agents {', '.join(agents)}"
          + (f" (not installed: {', '.join(missing)})" if missing else "") + f"; work folder {args.work}", flush=True)
    rows: list[dict[str, Any]] = []
    for task in args.task or list(TASKS):  # every agent on hello-file first
        for agent in agents:
            job, seconds, code = run_agent(agent, task, args.work, meter, args.timeout, local)
            mine = rows_of(agent, job, seconds, code)
            rows += mine
            for r in mine:
                print(f"test-models: {agent} {r['task']}: reward {r['reward']}, {r.get('agent_outcome')}, "
                      f"failure {r['failure_mode']}, {r.get('calls', 0)} calls, {r.get('agent_seconds', '-')} s, "
                      f"job {round(seconds)} s ({r['folder']})", flush=True)
            if args.record:
                record(agent, job, args.record, version, mine, dialect)
            (args.work / "rows.json").write_text(json.dumps(rows, indent=1) + "\n")
    meter.shutdown()
    print(f"\n{version}, Qwen2.5-Coder-0.5B-Instruct Q4, {datetime.now(UTC):%Y-%m-%d}\n")
    print(table(rows))
    bad = [r for r in rows if r.get("agent_outcome") not in AGENT_ENDS
           or r.get("failure_mode") not in ("none", "agent_timeout")]
    for r in bad:
        print(f"test-models: {r['agent']} {r['task']}: not ended by the agent: {r.get('failure_mode')} "
              f"{r.get('error') or ''} {r.get('last_error') or ''}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
