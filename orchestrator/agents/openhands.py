"""OpenHands (PyPI `openhands-ai`): its headless CLI (`openhands.core.main -f TASK`,
CodeActAgent) with its local runtime, so the commands it runs run in the trial's container
itself (no Docker in Docker), speaking Chat Completions (through litellm) to the trial's
proxy.

1.6.0 is the last release that ships this CLI (from 1.7.0 the package is its web server
only). It needs Python >= 3.12 and is installed for 3.13 from wheels only (agents.install,
a cross-version pip install, with the PEP 594 backports of aifc and audioop, which it
imports although 3.13 dropped them), compiled to .pyc at install: 1.87 GB, 91-118 s on a
2-core host, part of `--install all`. It runs on its own Python, whatever the image has:
Debian trixie's python3.13 and tmux (its bash tool drives tmux) with every library they
load, glibc's loader included (`RUNTIME`, 64 MB), run through that loader, so any x86-64
Linux image with sh should do (both started on Debian 11 to 13; OpenHands solved hello-file
on bookworm, python3 3.11, and ran on a bullseye image without Python, glibc 2.31).
Its packages reach only that Python (ORCHESTRA_PYTHON_PATH, read at its start), never the
PYTHONPATH its shell and the task's own python3 inherit. Its CLI and action server take
~690 MB, so a task giving it under 1024 MB is refused with the reason (exit 127) before any
model call.

The CLI runs with one change made in its process: the Jupyter plugin is dropped from
CodeActAgent's runtime plugins (its IPython tool is off; the kernel gateway fails from a
mounted install); and with a member's `env: {ORCHESTRA_STREAM: "1"}` its model calls are
streamed (it asks for whole answers otherwise). The model is `openai/orchestra-model` at the proxy's address with the
per-trial token as its key, native tool calling on (litellm knows no such model; a roster
member's `env: {LLM_NATIVE_TOOL_CALLING: "false"}` gives its tools-in-the-prompt mode for
servers that fill no `tool_calls`), one retry (the proxy retries the provider), litellm's
cost map read locally, browsing, MCP and prompt extensions off. OpenHands exits 0 however its run ended, so the run script reads
its saved trajectory and its log: a `finish` is 0, its iteration limit or its stuck
detector the step limit, anything else 1. That trajectory (its event list) is its log, converted by `openhands_events`.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.agents.base import EXIT_STEP_LIMIT
from orchestrator.agents.cli import MODEL, Events, InstalledAgent, needs_memory
from orchestrator.agents.install import Recipe
from orchestrator.paths import AGENT_LOGS

PYTHON = "3.13"
# its CLI and its action server each hold ~400 MB once imported (688 MB peak for the pair on
# hello-file, measured); under a task's 512 MB the kernel killed the server as it started
MIN_MEMORY_MB = 1024
# Debian trixie's python3.13 and tmux with every library they load, glibc's loader included:
# run through that loader (install._wrap), they need nothing of the task image's own
RUNTIME = Recipe(
    "openhands-runtime", "deb",
    "python3.13-minimal libpython3.13-minimal libpython3.13-stdlib python3.13 libc6 libssl3t64 libffi8 "
    "zlib1g libexpat1 libsqlite3-0 libbz2-1.0 liblzma5 libzstd1 libncursesw6 libtinfo6 libreadline8t64 "
    "libuuid1 libdb5.3t64 libgcc-s1 tmux libevent-core-2.1-7t64 libjemalloc2 libsystemd0 libcap2",
    "trixie", binary=f"usr/bin/orchestra-python{PYTHON}",
    wrap=((f"usr/bin/python{PYTHON}", f"orchestra-python{PYTHON}"), ("usr/bin/tmux", "tmux")))
# generation settings OpenHands reads from its environment (LLM_*)
_GENERATION = {"temperature": "LLM_TEMPERATURE", "top_p": "LLM_TOP_P",
               "max_output_tokens": "LLM_MAX_OUTPUT_TOKENS", "max_tokens": "LLM_MAX_OUTPUT_TOKENS"}
# its CLI, without the Jupyter plugin CodeActAgent always asks its runtime for: its IPython
# tool is off (AGENT_ENABLE_JUPYTER=false), and the kernel gateway it would start fails to
# connect from a mounted install (20 s of retries, then the runtime gives up). With
# ORCHESTRA_STREAM=1 (a roster member's env) its model calls are streamed: OpenHands 1.6.0
# asks litellm for whole answers only, so its completion is replaced by litellm's streamed
# one, the chunks joined back by litellm (stream_chunk_builder) into the answer it expects
# (no single quotes here: the run script quotes it)
_MAIN = """import os, runpy
from openhands.agenthub.codeact_agent.codeact_agent import CodeActAgent
CodeActAgent.sandbox_plugins = [p for p in CodeActAgent.sandbox_plugins if p.name != "jupyter"]
if os.environ.get("ORCHESTRA_STREAM") == "1":
    import litellm
    import openhands.llm.llm as llm_module
    def streamed(*args, **kwargs):
        kwargs.update(stream=True, stream_options={"include_usage": True})
        chunks = list(litellm.completion(*args, **kwargs))
        return litellm.stream_chunk_builder(chunks, messages=kwargs.get("messages"))
    llm_module.litellm_completion = streamed
runpy.run_module("openhands.core.main", run_name="__main__", alter_sys=True)
"""
# whether it finished: a `finish` in its saved trajectory
_OUTCOME = """import json, sys
try:
    events = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(1)
sys.exit(not any(isinstance(e, dict) and e.get("action") == "finish" for e in events))
"""
# its own step limit (MAX_ITERATIONS) or its stuck detector, as its log says them
_LOOPING = "Agent reached maximum iteration|AgentStuckInLoopError"


class OpenHands(InstalledAgent):
    recipe = Recipe("openhands", "pypi", "openhands-ai", "1.6.0", python=PYTHON,
                    sdists=("func-timeout==4.3.5",),
                    # it imports aifc (gone from 3.13's stdlib): the PEP 594 backports
                    extra=("standard-aifc==3.13.0", "standard-chunk==3.13.0", "audioop-lts==0.2.1"),
                    interpreter=RUNTIME, build="pyc")
    runtime = RUNTIME
    needs = (f"x86-64 Linux and sh; Python {PYTHON} and tmux (Debian trixie's, with their own "
             f"glibc) are mounted, none of the image's used; {MIN_MEMORY_MB} MB")
    own_log = "openhands.trajectory.json"

    def script(self) -> str:
        runtime = f"{self.home.rsplit('/', 1)[0]}/{RUNTIME.name}"
        python = f"{runtime}/root/usr/bin/orchestra-python{PYTHON}"
        generation = "".join(f" {_GENERATION[k]}={json.dumps(v)}" for k, v in sorted(self.member.generation.items())
                             if k in _GENERATION and isinstance(v, (int, float)) and not isinstance(v, bool))
        log = f"{AGENT_LOGS}/{self.own_log}"
        return needs_memory("openhands", MIN_MEMORY_MB) + f"""\
py={python}
if ! "$py" -c pass 2>/tmp/orchestra-agent-check.txt; then
  echo "orchestra: openhands cannot run in this task image: it needs x86-64 Linux (its Python {PYTHON} \\
is mounted, Debian trixie's with its own glibc); it said: $(head -c 400 /tmp/orchestra-agent-check.txt)" >&2
  exit 127
fi
state=/tmp/orchestra-openhands
mkdir -p "$state"
# its Python and tmux (wrappers in {runtime}/root/usr/bin, which holds nothing else);
# its modules' .pyc were compiled at install, beside them in the read-only mount
# its packages through ORCHESTRA_PYTHON_PATH (read by that Python only, at its start); the
# image's PYTHONPATH kept aside for its shell, and not on OpenHands' own path
if [ "${{PYTHONPATH+set}}" ]; then export ORCHESTRA_IMAGE_PYTHONPATH="$PYTHONPATH"; fi
unset PYTHONPATH
export PATH="{runtime}/root/usr/bin:$PATH" ORCHESTRA_PYTHON_PATH={self.home}/lib \\
  LLM_MODEL=openai/{MODEL} LLM_BASE_URL="$ORCHESTRA_MODEL_URL" LLM_API_KEY="$ORCHESTRA_MODEL_TOKEN" \\
  LLM_NATIVE_TOOL_CALLING="${{LLM_NATIVE_TOOL_CALLING:-true}}" LLM_NUM_RETRIES=1 LLM_DROP_PARAMS=true LLM_CACHING_PROMPT=false \\
  LLM_LOG_COMPLETIONS=false LITELLM_LOCAL_MODEL_COST_MAP=True{generation} \\
  RUNTIME=local SKIP_DEPENDENCY_CHECK=1 RUN_AS_OPENHANDS=false SU_TO_USER=false USER="$(id -un)" \\
  SANDBOX_VOLUMES="$PWD:/workspace:rw" AGENT_ENABLE_BROWSING=false ENABLE_BROWSER=false \\
  AGENT_ENABLE_JUPYTER=false AGENT_ENABLE_PROMPT_EXTENSIONS=false AGENT_ENABLE_MCP=false \\
  MAX_ITERATIONS={self.max_turns() or 100} FILE_STORE=local FILE_STORE_PATH="$state/store" \\
  SAVE_TRAJECTORY_PATH={log} OPENHANDS_SUPPRESS_BANNER=1 DO_NOT_TRACK=1
unset OPENAI_API_KEY ANTHROPIC_API_KEY
# its stderr also kept in the container, for why it stopped (the saved trajectory omits it)
{{ "$py" -c '{_MAIN}' -f "$1" </dev/null 2>&1 1>&3; echo $? >"$state/code"; }} 3>&1 | tee "$state/stderr" >&2
code=$(cat "$state/code" 2>/dev/null || echo 1)
"$py" -c '{_OUTCOME}' {log} && exit 0
grep -qE "{_LOOPING}" "$state/stderr" && exit {EXIT_STEP_LIMIT}
[ "$code" = 0 ] && exit 1  # it stopped without finishing
exit "$code"
"""

    def convert(self, log: object) -> list[dict[str, Any]]:
        return openhands_events(log)


def openhands_events(log: object) -> list[dict[str, Any]]:
    """DESIGN 3.6 records from OpenHands' saved trajectory (its event list): the agent's
    thoughts and messages, each tool call (the function and the arguments the model gave,
    from the event's tool-call metadata, else the action's own args) and its observation
    (the output, the exit code, an error), and its `finish` as the closing message. The
    system prompt, the user's task, recalls and state changes are skipped."""
    out = Events()
    for event in log if isinstance(log, list) else []:
        if not isinstance(event, dict) or event.get("source") not in ("agent", "environment"):
            continue
        action, observation = event.get("action"), event.get("observation")
        args, meta = _dict(event.get("args")), _dict(event.get("tool_call_metadata"))
        call_id = meta.get("tool_call_id") if isinstance(meta.get("tool_call_id"), str) else None
        if isinstance(action, str) and action not in ("system", "recall", "change_agent_state"):
            out.message(args.get("thought"))
            if action == "message":
                out.message(args.get("content"))
            elif action == "finish":
                out.message(args.get("final_thought") or event.get("message"))
            elif call_id is not None:
                out.dispatch(call_id, meta.get("function_name") or action, _arguments(meta, call_id, args))
            elif action != "think":
                out.dispatch(f"openhands-{event.get('id')}", action, args)
        elif isinstance(observation, str) and observation not in ("recall", "agent_state_changed", "null"):
            exit_code = _dict(_dict(event.get("extras")).get("metadata")).get("exit_code")
            content = event.get("content")
            text = content if isinstance(content, str) else ""
            if call_id is None and event.get("cause") is not None:
                call_id = f"openhands-{event.get('cause')}"
            if call_id is None or call_id not in out.calls:
                out.message(text, kind="text")  # an error or an observation of no call
                continue
            failed = observation == "error" or (isinstance(exit_code, int) and exit_code not in (0, -1)
                                                and not isinstance(exit_code, bool))
            out.result(call_id, text, err=(text or observation) if failed else None, exit_code=exit_code)
    return out.records()


def _arguments(meta: dict[str, Any], call_id: str, args: dict[str, Any]) -> object:
    """The arguments the model gave this call, from the model response OpenHands kept."""
    choices = _dict(meta.get("model_response")).get("choices")
    for choice in choices if isinstance(choices, list) else []:
        calls = _dict(_dict(choice).get("message")).get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            function = _dict(call).get("function")
            if _dict(call).get("id") == call_id and isinstance(function, dict):
                raw = function.get("arguments")
                try:
                    return json.loads(raw) if isinstance(raw, str) else raw
                except ValueError:
                    return raw
    return {k: v for k, v in args.items() if k not in ("thought", "security_risk")}



def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
