"""Claude Code (npm): its native build (`@anthropic-ai/claude-code-linux-x64`, a single
executable that needs no Node, glibc >= 2.26), `claude -p` headless with its permission
bypass, speaking Anthropic Messages to the trial's proxy.

Every model alias it may pick (main, small/fast, haiku/sonnet/opus defaults, subagents) is
the proxy's model name; telemetry, error reporting, auto-update, non-essential traffic and
its own memory are off; its own retries are cut to one (the proxy retries the provider).
Its stream-json output (`--output-format stream-json --verbose`) is its log: the same
shape Qwen Code writes, converted by `stream_json_events`.
"""

from __future__ import annotations

from orchestrator.agents.base import EXIT_STEP_LIMIT
from orchestrator.agents.cli import MODEL, Events, InstalledAgent, refuse_unless_runs, text_of
from orchestrator.agents.install import Recipe
from orchestrator.paths import AGENT_LOGS
from orchestrator.util import JsonObject

_ALIASES = ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
            "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
            "ANTHROPIC_DEFAULT_FABLE_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL")


class ClaudeCode(InstalledAgent):
    recipe = Recipe("claude-code", "npm", "@anthropic-ai/claude-code-linux-x64", "2.1.332",
                    binary="claude")
    api = "messages"
    needs = "glibc >= 2.26 (its native binary; no Node)"
    own_log = "claude-code.jsonl"
    log_lines = True

    def script(self) -> str:
        binary = f"{self.home}/pkg/package/{self.recipe.binary}"
        turns = f" --max-turns {self.max_turns()}" if self.max_turns() else ""
        aliases = " ".join(f"{name}={MODEL}" for name in _ALIASES)
        log = f"{AGENT_LOGS}/{self.own_log}"
        return refuse_unless_runs(binary, "claude-code", self.needs) + f"""\
export ANTHROPIC_BASE_URL="${{ORCHESTRA_MODEL_URL%/v1}}" ANTHROPIC_API_KEY="$ORCHESTRA_MODEL_TOKEN" \\
  {aliases} \\
  DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 \\
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 CLAUDE_CODE_DISABLE_AUTO_MEMORY=1 \\
  CLAUDE_CODE_MAX_RETRIES=1 IS_SANDBOX=1 CLAUDE_CONFIG_DIR=/tmp/orchestra-claude
unset ANTHROPIC_AUTH_TOKEN CLAUDE_CODE_OAUTH_TOKEN
mkdir -p "$CLAUDE_CONFIG_DIR"
{binary} -p --output-format stream-json --verbose --dangerously-skip-permissions \\
  --model {MODEL}{turns} <"$1" >{log}
code=$?
tail -n 1 {log} | grep -q '"subtype": *"error_max_turns"' && exit {EXIT_STEP_LIMIT}
exit "$code"
"""

    def convert(self, log: object) -> list[JsonObject]:
        return stream_json_events(log)


def stream_json_events(log: object) -> list[JsonObject]:
    """DESIGN 3.6 records from Claude Code's (or Qwen Code's) stream-json lines: each
    assistant message's text and tool calls, each tool result the CLI sent back."""
    out = Events()
    for record in log if isinstance(log, list) else []:
        if not isinstance(record, dict) or record.get("type") not in ("assistant", "user"):
            continue
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if record["type"] == "assistant" and kind == "text":
                out.message(block.get("text"))
            elif record["type"] == "assistant" and kind == "tool_use":
                out.dispatch(block.get("id"), block.get("name"), block.get("input"))
            elif record["type"] == "user" and kind == "tool_result":
                output = text_of(block.get("content"))
                out.result(block.get("tool_use_id"), output,
                           err=(output or "error") if block.get("is_error") is True else None)
    return out.records()
