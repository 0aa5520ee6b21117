"""Codex CLI (npm): the static musl build from its Linux platform package
(`@openai/codex@VERSION-linux-x64`, runs on any x86-64 Linux image), `codex exec` headless
with approvals and its sandbox bypassed (the trial's container is the sandbox), speaking
OpenAI Responses to the trial's proxy.

Its config (written by the run script into CODEX_HOME, outside /tmp, which Codex refuses
for its helpers) names one model provider, the proxy, whose key is read from
ORCHESTRA_MODEL_TOKEN; update checks, analytics, feedback, hosted web search and its own
memories are off; its retries are cut to one. Its `--json` event stream is its log.
"""

from __future__ import annotations

from orchestrator.agents.cli import MODEL, Events, InstalledAgent, refuse_unless_runs
from orchestrator.agents.install import Recipe
from orchestrator.paths import AGENT_LOGS
from orchestrator.util import JsonObject

VENDOR = "pkg/package/vendor/x86_64-unknown-linux-musl"


class Codex(InstalledAgent):
    recipe = Recipe("codex", "npm", "@openai/codex", "0.171.0-linux-x64", binary="vendor/x86_64-unknown-linux-musl/bin/codex")
    api = "responses"
    needs = "x86-64 Linux (a static binary) and bash"
    own_log = "codex.jsonl"
    log_lines = True

    def script(self) -> str:
        vendor = f"{self.home}/{VENDOR}"
        return refuse_unless_runs(f"{vendor}/bin/codex", "codex", self.needs) + f"""\
export CODEX_HOME=/var/tmp/orchestra-codex PATH="$PATH:{vendor}/codex-path"
mkdir -p "$CODEX_HOME" 2>/dev/null || {{ CODEX_HOME=$HOME/.orchestra-codex; mkdir -p "$CODEX_HOME"; }}
cat >"$CODEX_HOME/config.toml" <<EOF
model = "{MODEL}"
model_provider = "orchestra"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.orchestra]
name = "orchestra"
base_url = "$ORCHESTRA_MODEL_URL"
env_key = "ORCHESTRA_MODEL_TOKEN"
wire_api = "responses"
request_max_retries = 1
stream_max_retries = 1

[analytics]
enabled = false

[feedback]
enabled = false

[features]
memories = false
EOF
exec {vendor}/bin/codex exec --json --dangerously-bypass-approvals-and-sandbox \\
  --skip-git-repo-check --model {MODEL} - <"$1" >{AGENT_LOGS}/{self.own_log}
"""

    def convert(self, log: object) -> list[JsonObject]:
        """Codex's `--json` lines: each completed item (its message, a command it ran with
        the output and exit code, a file change, an MCP tool call)."""
        out = Events()
        for record in log if isinstance(log, list) else []:
            item = record.get("item") if isinstance(record, dict) and record.get("type") == "item.completed" else None
            if not isinstance(item, dict):
                continue
            kind, item_id = item.get("type"), item.get("id")
            if kind == "agent_message":
                out.message(item.get("text"))
            elif kind == "command_execution":
                out.dispatch(item_id, "shell", {"command": item.get("command")})
                failed = item.get("status") not in ("completed", None)
                out.result(item_id, item.get("aggregated_output") or "", exit_code=item.get("exit_code"),
                           err=str(item.get("status")) if failed else None)
            elif kind == "file_change":
                out.dispatch(item_id, "apply_patch", {"changes": item.get("changes")})
                out.result(item_id, str(item.get("status") or ""),
                           err="failed" if item.get("status") == "failed" else None)
            elif kind == "mcp_tool_call":
                out.dispatch(item_id, f"{item.get('server')}.{item.get('tool')}", item.get("arguments"))
                error = item.get("error")
                out.result(item_id, item.get("result") or "", err=str(error) if error else None)
            elif kind == "error":
                out.message(item.get("message"), kind="text")
        return out.records()
