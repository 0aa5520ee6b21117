"""Installed agents: popular agent CLIs, installed once on the host (agents.install) and
mounted read-only at /opt/orchestra-agents/NAME, wired to the trial's model proxy.

Each adapter gives the run script (copied in with the instruction), the proxy wiring
(base URL, the trial token, a model name the proxy replaces with the endpoint's own),
its retry settings (the proxy retries the provider; the agent must not retry a budget
refusal ten times), its exit codes mapped to outcomes (0 done, 5 stopped on its own step
limit, else crashed) and its trajectory: converted from its own log where it writes one
(mini-swe-agent, Claude Code, Codex, Gemini CLI, Qwen Code, OpenHands), otherwise built from the
proxy's record of the exchanges, and then the audit says `incomplete` (what the agent did
after its last model call is not seen). The seam itself is agents/cli.py; each CLI added
since has its own module (claude_code, codex, gemini, openhands).

Python agents (mini-swe-agent, aider) need the task image's python3 to be 3.11 (Debian
bookworm's, the offline base's); the run script says so and exits 127 otherwise. OpenHands
(>= 3.12 only) needs nothing of the image's Python: it is installed for 3.13 from wheels and
brings Debian trixie's python3.13 and tmux with every library they load, run through their
own loader (agents/openhands.py), so any x86-64 Linux image with sh does; it refuses a task
that gives it under 1024 MB of memory instead.
"""

from __future__ import annotations

import json
import shlex

from pydantic import BaseModel, ConfigDict

from orchestrator.agents.base import EXIT_STEP_LIMIT
from orchestrator.agents.claude_code import ClaudeCode
from orchestrator.agents.cli import (
    MODEL,
    MOUNT,
    RUN_DIR,
    RUN_SCRIPT,
    InstalledAgent,
)
from orchestrator.agents.codex import Codex
from orchestrator.agents.gemini import GeminiCli, QwenCode
from orchestrator.agents.install import PYTHON, Recipe, install_dir
from orchestrator.agents.openhands import OpenHands
from orchestrator.paths import AGENT_LOGS
from orchestrator.services import dispatch_event
from orchestrator.tasks import Task
from orchestrator.util import JsonObject

__all__ = ["INSTALLED", "MODEL", "MOUNT", "RUN_SCRIPT", "AgentRow", "InstalledAgent", "listing"]

_PY_CHECK = (f'python3 -c "import sys; sys.exit(sys.version_info[:2] != {PYTHON})" 2>/dev/null || '
             f'{{ echo "orchestra: this agent needs python{PYTHON[0]}.{PYTHON[1]} as python3 in the '
             'task image" >&2; exit 127; }\n')


class MiniSweAgent(InstalledAgent):
    """mini-swe-agent (PyPI): yolo, exits when it submits. Tool-call mode (`mini.yaml`) by
    default; a roster member's `env: {MSWEA_CONFIG: mini_textbased.yaml}` picks its text
    mode (one fenced command per reply) for models whose server fills no `tool_calls`."""

    recipe = Recipe("mini-swe-agent", "pypi", "mini-swe-agent", "2.4.6")
    needs = "python3 3.11 (installed for the host's Python 3.11)"
    own_log = "mini-swe-agent.traj.json"

    def script(self) -> str:
        generation = dict(self.member.generation)
        steps = int(generation.pop("max_turns", 30))  # type: ignore[arg-type]
        if "max_output_tokens" in generation:
            generation["max_tokens"] = generation.pop("max_output_tokens")
        kwargs = "".join(f" \\\n  -c {shlex.quote(f'model.model_kwargs.{k}={json.dumps(v)}')}"
                         for k, v in sorted(generation.items()))  # the manifest's generation
        return _PY_CHECK + f"""export PYTHONPATH={self.home}/lib MSWEA_SILENT_STARTUP=1 \\
  MSWEA_COST_TRACKING=ignore_errors LITELLM_LOCAL_MODEL_COST_MAP=True \\
  MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT=2 MSWEA_GLOBAL_CONFIG_DIR=/tmp/mswea MSWEA_CONFIGURED=true
traj={AGENT_LOGS}/{self.own_log}
config=${{MSWEA_CONFIG:-mini.yaml}}
class=litellm
case "$config" in *textbased*) class=litellm_textbased ;; esac
python3 -c 'import sys; sys.argv[0] = "mini"; from minisweagent.run.mini import app; app()' \\
  --yolo --exit-immediately --cost-limit 0 --model openai/{MODEL} --model-class "$class" \\
  --task "$(cat "$1")" -c "$config" \\
  -c "model.model_kwargs.api_base=$OPENAI_BASE_URL" -c "agent.step_limit={steps}"{kwargs} \\
  --output "$traj" </dev/null
code=$?
status=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["info"]["exit_status"])' "$traj" 2>/dev/null)
case "$status" in
  Submitted) exit 0 ;;
  LimitsExceeded) exit {EXIT_STEP_LIMIT} ;;
esac
[ "$code" = 0 ] && exit 1  # it stopped without submitting
exit "$code"
"""

    def convert(self, log: object) -> list[JsonObject]:
        events: list[JsonObject] = []
        for message in log["messages"]:  # type: ignore[index]
            role, content = message.get("role"), message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            if role == "assistant":
                if text:
                    events.append({"kind": "message", "text": text})
                events += [dispatch_event(call) for call in message.get("tool_calls") or []]
            elif role == "tool":
                events.append({"kind": "tool_result", "text": text,
                               "tool": {"id": message.get("tool_call_id"), "output": text}})
            elif role == "user" and events:  # observations in text mode, format errors
                events.append({"kind": "text", "text": text})
        return [{"seq": i, "event": e} for i, e in enumerate(events)]


class Aider(InstalledAgent):
    """aider (PyPI): one message, whole-file edits, no git, no streaming, no telemetry."""

    recipe = Recipe("aider", "pypi", "aider-chat", "0.86.2")
    needs = "python3 3.11 (installed for the host's Python 3.11)"

    def script(self) -> str:
        return _PY_CHECK + f"""export PYTHONPATH={self.home}/lib LITELLM_LOCAL_MODEL_COST_MAP=True \\
  AIDER_CHECK_UPDATE=false AIDER_ANALYTICS_DISABLE=true HOME=/tmp/aider-home
mkdir -p "$HOME"
python3 -c 'import sys; sys.argv[0] = "aider"; from aider.main import main; sys.exit(main())' \\
  --model openai/{MODEL} --openai-api-base "$OPENAI_BASE_URL" --openai-api-key "$OPENAI_API_KEY" \\
  --message-file "$1" --yes-always --no-git --no-stream --no-pretty \\
  --no-show-model-warnings --no-check-update --analytics-disable --edit-format whole \\
  --no-detect-urls --map-tokens 0 \\
  --chat-history-file {AGENT_LOGS}/aider.chat.history.md \\
  --input-history-file {AGENT_LOGS}/aider.input.history </dev/null
"""


def opencode_config(url_var: str, token_var: str, ask: bool) -> bytes:
    """opencode's config: an OpenAI-compatible provider at the proxy (its URL and the trial's
    token read from the environment variables named), asking for MODEL, autoupdate and
    sharing off, web fetches denied; edits and shell commands allowed outright, or asked
    (`ask`: an ACP client's permission policy decides)."""
    config = {
        "$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
        "model": f"orchestra/{MODEL}",
        "provider": {"orchestra": {
            "npm": "@ai-sdk/openai-compatible", "name": "orchestra",
            "options": {"baseURL": f"{{env:{url_var}}}", "apiKey": f"{{env:{token_var}}}"},
            "models": {MODEL: {"name": MODEL}}}},
        "permission": {"edit": "ask" if ask else "allow", "bash": "ask" if ask else "allow",
                       "webfetch": "deny"},
    }
    return json.dumps(config, indent=2).encode()


class OpenCode(InstalledAgent):
    """opencode (npm, a bundled binary): `opencode run` with an OpenAI-compatible provider
    pointed at the proxy (it streams: the proxy answers streams as server-sent events)."""

    recipe = Recipe("opencode", "npm", "opencode-linux-x64", "1.18.34", binary="bin/opencode")
    needs = "glibc (its bundled binary)"
    CONFIG = f"{RUN_DIR}/opencode.json"

    def files(self, task: Task) -> dict[str, bytes]:
        config = opencode_config("OPENAI_BASE_URL", "OPENAI_API_KEY", ask=False)
        return {**super().files(task), self.CONFIG: config}

    def script(self) -> str:
        return f"""export OPENCODE_CONFIG={self.CONFIG} HOME=/tmp/opencode-home \\
  OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 \\
  OPENCODE_DISABLE_SHARE=1
mkdir -p "$HOME"
exec {self.home}/pkg/package/{self.recipe.binary} run --model orchestra/{MODEL} \\
  --print-logs --log-level INFO "$(cat "$1")" </dev/null
"""


INSTALLED: dict[str, type[InstalledAgent]] = {
    cls.recipe.name: cls for cls in (MiniSweAgent, Aider, OpenCode, ClaudeCode, Codex, GeminiCli,
                                     QwenCode, OpenHands)}


class AgentRow(BaseModel):
    """One row of `orchestra agents` (its --json too)."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: str  # "built-in", or "installed (<kind> <package>)"
    version: str
    installed: bool  # this host has it (an installed CLI is installed on first use)
    api: str = ""  # the model API it speaks ("" for a built-in agent)
    needs: str = ""  # what the task's image must have for it
    path: str = ""  # an installed CLI's own folder ("" for a built-in agent)


def listing() -> list[AgentRow]:
    """What `orchestra agents` prints for the installed agents."""
    return [AgentRow(name=name, kind=f"installed ({cls.recipe.kind} {cls.recipe.package})",
                     version=cls.recipe.version, installed=cls.is_installed(), api=cls.api,
                     needs=cls.needs, path=str(install_dir(cls.recipe))) for name, cls in INSTALLED.items()]
