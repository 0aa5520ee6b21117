"""The two Node CLIs: Gemini CLI (speaks Gemini's generateContent) and Qwen Code (its fork,
driven here through OpenAI Chat Completions), each from the npm registry (one bundled
JavaScript file, no dependencies to install), run headless in yolo mode on the Node build
orchestra mounts beside them (cli.NODE), with `--output-format stream-json` as their log.

Their settings (a system settings file, which wins over anything in the image) turn
telemetry, usage statistics and auto-update off; their state goes to a folder of their own
(GEMINI_CLI_HOME, QWEN_HOME), never the task's HOME. Gemini CLI exits 53 on its own turn
limit (`maxSessionTurns`, from the member's generation `max_turns`): a step_limit.
"""

from __future__ import annotations

import json

from orchestrator.agents.base import EXIT_STEP_LIMIT
from orchestrator.agents.claude_code import stream_json_events
from orchestrator.agents.cli import (
    MODEL,
    MOUNT,
    NODE,
    NODE_NEEDS,
    RUN_DIR,
    Events,
    InstalledAgent,
    needs_memory,
    refuse_unless_runs,
)
from orchestrator.agents.install import Recipe
from orchestrator.paths import AGENT_LOGS
from orchestrator.tasks import Task
from orchestrator.util import JsonObject

NODE_BIN = f"{MOUNT}/{NODE.name}/pkg/package/{NODE.binary}"
GEMINI_TURN_LIMIT = 53  # Gemini CLI's FatalTurnLimitedError


class GeminiCli(InstalledAgent):
    recipe = Recipe("gemini-cli", "npm", "@google/gemini-cli", "0.61.0", binary="bundle/gemini.js")
    runtime = NODE
    api = "gemini"
    needs = NODE_NEEDS + "; memory_mb >= 384"
    own_log = "gemini-cli.jsonl"
    log_lines = True
    SETTINGS = f"{RUN_DIR}/gemini-settings.json"

    def files(self, task: Task) -> dict[str, bytes]:
        settings: JsonObject = {
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "telemetry": {"enabled": False}, "privacy": {"usageStatisticsEnabled": False},
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "model": {"name": MODEL}}
        if self.max_turns():
            settings["model"]["maxSessionTurns"] = self.max_turns()
        return {**super().files(task), self.SETTINGS: json.dumps(settings, indent=2).encode()}

    def script(self) -> str:
        log = f"{AGENT_LOGS}/{self.own_log}"
        return refuse_unless_runs(NODE_BIN, "gemini-cli", self.needs) + needs_memory(self.name, 384) + f"""\
export GEMINI_API_KEY="$ORCHESTRA_MODEL_TOKEN" GOOGLE_GEMINI_BASE_URL="${{ORCHESTRA_MODEL_URL%/v1}}" \\
  GEMINI_MODEL={MODEL} GEMINI_CLI_SYSTEM_SETTINGS_PATH={self.SETTINGS} \\
  GEMINI_CLI_HOME=/tmp/orchestra-gemini GEMINI_CLI_NO_RELAUNCH=true GEMINI_CLI_TRUST_WORKSPACE=true
unset GOOGLE_API_KEY GOOGLE_GENAI_USE_VERTEXAI GOOGLE_GENAI_USE_GCA GOOGLE_APPLICATION_CREDENTIALS
mkdir -p "$GEMINI_CLI_HOME"
{NODE_BIN} {self.home}/pkg/package/{self.recipe.binary} -m {MODEL} --yolo \\
  --output-format stream-json -p "$(cat "$1")" </dev/null >{log}
code=$?
[ "$code" = {GEMINI_TURN_LIMIT} ] && exit {EXIT_STEP_LIMIT}
exit "$code"
"""

    def convert(self, log: object) -> list[JsonObject]:
        """Gemini CLI's stream-json lines: assistant messages (streamed in deltas, joined
        per turn), tool_use and tool_result events paired by tool_id."""
        out = Events()
        said: list[str] = []
        for record in log if isinstance(log, list) else []:
            if not isinstance(record, dict):
                continue
            kind = record.get("type")
            if kind == "message" and record.get("role") == "assistant":
                if isinstance(record.get("content"), str):
                    said.append(record["content"])
                continue
            if said:  # a turn's text ends where anything else begins
                out.message("".join(said))
                said = []
            if kind == "tool_use":
                out.dispatch(record.get("tool_id"), record.get("tool_name"), record.get("parameters"))
            elif kind == "tool_result":
                error = record.get("error")
                failed = record.get("status") not in ("success", None)
                detail = error.get("message") if isinstance(error, dict) else error
                out.result(record.get("tool_id"), record.get("output") or "",
                           err=str(detail or record.get("status")) if failed else None)
            elif kind == "error":
                out.message(record.get("message"), kind="text")
        if said:
            out.message("".join(said))
        return out.records()


class QwenCode(InstalledAgent):
    """Its Node heap reaches ~500 MB on hello-file (384 MB is not enough: measured), so it
    needs a task memory limit of at least 1 GB; under that it is refused with the reason."""

    recipe = Recipe("qwen-code", "npm", "@qwen-code/qwen-code", "0.15.10", binary="cli.js")
    runtime = NODE
    api = "chat"
    needs = NODE_NEEDS + "; memory_mb >= 1024"
    own_log = "qwen-code.jsonl"
    log_lines = True
    SETTINGS = f"{RUN_DIR}/qwen-settings.json"

    def files(self, task: Task) -> dict[str, bytes]:
        settings = {"general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                    "telemetry": {"enabled": False}, "privacy": {"usageStatisticsEnabled": False}}
        return {**super().files(task), self.SETTINGS: json.dumps(settings, indent=2).encode()}

    def script(self) -> str:
        log = f"{AGENT_LOGS}/{self.own_log}"
        turns = f" --max-session-turns {self.max_turns()}" if self.max_turns() else ""
        return refuse_unless_runs(NODE_BIN, "qwen-code", self.needs) + needs_memory(self.name, 1024) + f"""\
export OPENAI_BASE_URL="$ORCHESTRA_MODEL_URL" OPENAI_API_KEY="$ORCHESTRA_MODEL_TOKEN" \\
  OPENAI_MODEL={MODEL} QWEN_CODE_SYSTEM_SETTINGS_PATH={self.SETTINGS} QWEN_HOME=/tmp/orchestra-qwen \\
  QWEN_CODE_NO_RELAUNCH=true
mkdir -p "$QWEN_HOME"
{NODE_BIN} {self.home}/pkg/package/{self.recipe.binary} --auth-type openai -m {MODEL} --yolo{turns} \\
  --output-format stream-json "$(cat "$1")" </dev/null >{log}
code=$?
tail -n 1 {log} | grep -q '"subtype": *"error_max_turns"' && exit {EXIT_STEP_LIMIT}
exit "$code"
"""

    def convert(self, log: object) -> list[JsonObject]:
        return stream_json_events(log)
