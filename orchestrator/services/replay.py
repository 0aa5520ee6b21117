"""The replay endpoint: a real HTTP server speaking OpenAI's chat-completions protocol,
answering from a script (no model, no network). Used by the tests and `make demo`.

Script (YAML):

    fail_first: {status: 429, times: 2}    # optional: the first N calls fail (retry tests)
    rules:                                 # tried in order; the first that matches answers
      - when: {instruction: "hello.txt", turn: 0}      # substring of the first user message;
                                                       # turn = assistant messages so far
        extract: {cmd: "make check-fast --tag=MEMKEY-[A-Z0-9]+"}  # regexes over the whole
                                                       # conversation (group 1 if any);
                                                       # no match = rule skipped
        reply:
          tool_calls: [{name: shell, arguments: {command: "echo '{cmd}' > answer.txt"}}]
      - when: {instruction: "hello.txt"}
        reply: {content: "Done."}

`when` also takes `last_tool_output` (substring of the latest tool result), `last_user`
(substring of the latest user message: agents that open with canned example turns) and
`system` (substring of the system messages); a reply may set
`finish_reason` (e.g. "length": a reply cut at max_tokens). `{name}` in a
reply is replaced by what `extract` found. `trajectory: PATH` instead of `rules` replays the
tool calls of a recorded trajectory.jsonl in order, then its last message.

`ReplayEngine({"recorded": recorded_answers(JOB)})` serves a recorded job's exchanges back
(`orchestra run --replay-from JOB`): each call gets the recorded status and body of the
same conversation at the same turn, in recorded order, from the recorded trial of the same
task and attempt only (the trial's proxy names it in the path: `/v1/trial/<task#attempt>/`);
a call the recording does not have (the run diverged, or no trial named) gets a 400 saying
so, counted in `diverged`.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import yaml

from orchestrator.errors import InputError
from orchestrator.log import get_logger
from orchestrator.models import trajectory
from orchestrator.services.exchanges import conversation_key
from orchestrator.services.httpserve import BackgroundServer, HttpError, JsonHandler
from orchestrator.util import JsonObject

log = get_logger()


def load_script(path: Path) -> JsonObject:
    try:
        script = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: replay script not readable: {exc}") from exc
    if not isinstance(script, dict) or not ("rules" in script or "trajectory" in script):
        raise InputError(f"{path}: a replay script is a mapping with `rules` (or `trajectory`)")
    if "trajectory" in script:
        script["rules"] = _rules_from_trajectory((path.parent / script["trajectory"]).resolve())
    for index, rule in enumerate(script["rules"]):
        if not isinstance(rule, dict) or "reply" not in rule:
            raise InputError(f"{path}: field 'rules.{index}.reply': required")
        for name, pattern in (rule.get("extract") or {}).items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InputError(f"{path}: field 'rules.{index}.extract.{name}': bad regex: {exc}") from exc
    return script


def _rules_from_trajectory(path: Path) -> list[JsonObject]:
    rules, turn, last_text = [], 0, "Done."
    for _, record in trajectory.records(path):
        if record is None:
            continue  # a malformed line of agent data is skipped, never fatal
        event = trajectory.event_of(record)
        if event.get("kind") == "tool_dispatch":
            tool = event["tool"]
            args = tool["args"] if isinstance(tool["args"], dict) else {"command": tool["args"]}
            rules.append({"when": {"turn": turn}, "reply": {"tool_calls": [{"name": tool["name"], "arguments": args}]}})
            turn += 1
        elif event.get("kind") in ("message", "text") and event.get("text"):
            last_text = event["text"]
    rules.append({"when": {}, "reply": {"content": last_text}})
    return rules


def _conversation_text(messages: list[JsonObject]) -> str:
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(c.get("text", "") for c in content if isinstance(c, dict))
        parts.append(str(content or ""))
    return "\n".join(parts)


class ReplayEngine:
    def __init__(self, script: JsonObject):
        self.script = script
        self.calls = 0
        self.diverged = 0
        self.authorizations: list[str] = []  # what callers sent (tests check the proxy adds keys)
        self._lock = threading.Lock()

    def answer(self, request: JsonObject, trial: str | None = None) -> tuple[int, JsonObject]:
        with self._lock:
            self.calls += 1
            calls = self.calls
        if "recorded" in self.script:
            return self._recorded(request, trial)
        fail = self.script.get("fail_first") or {}
        if calls <= int(fail.get("times", 0)):
            status = int(fail.get("status", 429))
            return status, {"error": {"message": f"replay: scripted failure {calls}", "type": "scripted"}}
        messages = request.get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        instruction = _conversation_text(users[:1])
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        tools = [m for m in messages if m.get("role") == "tool"]
        last_tool = _conversation_text(tools[-1:]) if tools else ""
        last_user = _conversation_text(users[-1:])
        text = _conversation_text(messages)
        system = _conversation_text([m for m in messages if m.get("role") == "system"])
        for rule in self.script["rules"]:
            when = rule.get("when") or {}
            if "system" in when and when["system"] not in system:
                continue
            if "instruction" in when and when["instruction"] not in instruction:
                continue
            if "turn" in when and when["turn"] != turn:
                continue
            if "last_user" in when and when["last_user"] not in last_user:
                continue
            if "last_tool_output" in when and when["last_tool_output"] not in last_tool:
                continue
            found = {}
            for name, pattern in (rule.get("extract") or {}).items():
                match = re.search(pattern, text)
                if match is None:
                    break
                found[name] = match.group(1) if match.groups() else match.group(0)
            else:
                return 200, self._completion(request, rule["reply"], found, text)
        return 200, self._completion(request, {"content": "I have nothing scripted for this."}, {}, text)

    def _recorded(self, request: JsonObject, trial: str | None) -> tuple[int, JsonObject]:
        with self._lock:  # only the same task and attempt's recording answers it
            queue = (self.script["recorded"].get(trial) or {}).get(conversation_key(request)) \
                if trial is not None else None
            if queue:
                return queue.pop(0) if len(queue) > 1 else queue[0]
            self.diverged += 1
        return 400, {"error": {"message": "replay: the recording has no answer for this "
                               "conversation at this turn (the run diverged from it)",
                               "type": "replay_diverged"}}

    @staticmethod
    def _fill(value: object, found: JsonObject) -> object:
        if isinstance(value, str):
            for name, text in found.items():
                value = value.replace("{" + name + "}", text)
            return value
        if isinstance(value, dict):
            return {k: ReplayEngine._fill(v, found) for k, v in value.items()}
        if isinstance(value, list):
            return [ReplayEngine._fill(v, found) for v in value]
        return value

    def _completion(self, request: JsonObject, reply: JsonObject, found: JsonObject, prompt: str) -> JsonObject:
        reply = {k: self._fill(v, found) for k, v in reply.items()}  # _fill of a dict
        message: JsonObject = {"role": "assistant", "content": reply.get("content")}
        if reply.get("tool_calls"):
            message["tool_calls"] = [
                {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                 "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))}}
                for call in reply["tool_calls"]]
        completion_tokens = max(1, len(json.dumps(message)) // 4)
        return {
            "id": f"chatcmpl-replay-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
            "created": int(time.time()), "model": request.get("model", "replay"),
            "choices": [{"index": 0, "message": message, "finish_reason": reply.get(
                "finish_reason", "tool_calls" if message.get("tool_calls") else "stop")}],
            "usage": {"prompt_tokens": max(1, len(prompt) // 4), "completion_tokens": completion_tokens,
                      "total_tokens": max(1, len(prompt) // 4) + completion_tokens},
        }


def _trial_of(path: str) -> str | None:
    """The trial a proxy named in the path (`/v1/trial/<quoted task#attempt>/chat/...`)."""
    match = re.match(r"^/v1/trial/([^/]+)/chat/completions/?$", path)
    return urllib.parse.unquote(match.group(1)) if match else None


class ReplayServer(BackgroundServer):
    """Serves a ReplayEngine on host:port (port 0: any free one). With `api_key` it answers
    401 to a call without `Authorization: Bearer <api_key>`, as a provider would (the tests
    show the proxy adds the key the agent never sees)."""

    def __init__(self, script: JsonObject, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | None = None):
        self.engine = ReplayEngine(script)
        engine = self.engine

        class Handler(JsonHandler):
            event = "replay.request"

            def do_POST(self) -> None:  # noqa: N802
                engine.authorizations.append(self.headers.get("Authorization", ""))
                try:
                    request = json.loads(self.read_body(8 * 1024 * 1024) or b"{}")
                except (HttpError, ValueError, RecursionError):
                    request = None
                if api_key and self.headers.get("Authorization", "") != f"Bearer {api_key}":
                    self.reply(401, {"error": {"message": "replay: wrong or missing API key",
                                               "type": "invalid_api_key"}})
                elif not self.path.rstrip("/").endswith("/chat/completions") or not isinstance(request, dict):
                    self.reply(400, {"error": {"message": "POST a chat completion to /v1/chat/completions"}})
                else:
                    self.reply(*engine.answer(request, _trial_of(self.path)))

        # one replay endpoint serves a whole job's proxies: no per-server request rate
        super().__init__(Handler, host, port, name="replay", path="/v1", request_rate=None)
