"""The reference agent: a tool-calling loop against an OpenAI-compatible endpoint (stdlib only).

Instruction: the latest user message mentioning this agent on the relay, else
/logs/agent/instruction.md. Memory: unless ORCHESTRA_NO_MEMORY=1, pinned facts go into the
system prompt and the user turn carries a recall block (BM25 over the fact files, top-k,
size-capped), recorded as a memory_recall record; with the flag set nothing is injected or
recalled. It stops calling the model before ORCHESTRA_DEADLINE and honours the manifest's
generation settings (ORCHESTRA_GENERATION, JSON; max_turns bounds its loop) and stops when
the proxy refuses a call past the budget.
It always writes the trajectory of DESIGN 3.6.
"""

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import orchestra_memory as memory
import orchestra_trajectory as trajectory

OUTPUT_CAP = 16000
SHELL_TIMEOUT = 120
DEADLINE_MARGIN = 10
MAX_INVALID_CALLS = 3  # malformed text tool calls answered with a correction, then final
MAX_REPEATS = 5  # the same tool calls this many turns in a row: the model is looping; stop
# Exit codes (orchestra's convention for the agents it ships; see agents/base.py):
EXIT_DEADLINE, EXIT_BUDGET, EXIT_STEP_LIMIT, EXIT_ENDPOINT = 3, 4, 5, 6
SYSTEM = ("You are an autonomous agent working in a Linux container. Use the tools to do the "
          "task; when done, reply with a short final answer and no tool call.")

TOOLS = [
    {"name": "shell", "description": "Run a shell command in the workdir.",
     "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
    {"name": "read_file", "description": "Read a text file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "write_file", "description": "Write a text file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"]}},
    {"name": "mem_ls", "description": "List your engram memories.", "parameters": {"type": "object", "properties": {}}},
    {"name": "mem_get", "description": "Read one engram memory.",
     "parameters": {"type": "object", "properties": {"slug": {"type": "string"}}, "required": ["slug"]}},
    {"name": "mem_set", "description": "Write one engram memory.",
     "parameters": {"type": "object", "properties": {"slug": {"type": "string"}, "value": {"type": "string"}},
                    "required": ["slug", "value"]}},
    {"name": "chan_read", "description": "Read the channel's messages.", "parameters": {"type": "object", "properties": {}}},
    {"name": "chan_reply", "description": "Reply in a message's thread.",
     "parameters": {"type": "object", "properties": {"message_id": {"type": "string"}, "text": {"type": "string"}},
                    "required": ["message_id", "text"]}},
]


class EndpointError(Exception):
    """Any failure to get a usable reply: timeout, refused connection, 4xx, 5xx, bad JSON."""


TOOL_NAMES = {t["name"] for t in TOOLS}
_FENCED = re.compile(r"```(?:json|tool_call|tool)?\s*(\{.*?\})\s*```", re.DOTALL)
_TAGGED = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def _as_call(obj, index):
    """A {"name", "arguments"} object naming a known tool, checked against its schema:
    (call, None), or (None, what is wrong) for an attempt, or (None, None) for no attempt."""
    if not isinstance(obj, dict) or not (obj.get("name") or obj.get("function")):
        return None, None
    name = obj.get("name") or (obj.get("function") or {}).get("name")
    args = obj.get("arguments", obj.get("parameters", (obj.get("function") or {}).get("arguments", {})))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None, "the arguments of %s are not JSON" % name
    if name not in TOOL_NAMES:
        return None, "there is no tool %r (tools: %s)" % (name, ", ".join(sorted(TOOL_NAMES)))
    if not isinstance(args, dict):
        return None, "the arguments of %s are not an object" % name
    schema = next(t for t in TOOLS if t["name"] == name)["parameters"]
    missing = [key for key in schema.get("required", []) if key not in args]
    if missing:
        return None, "%s needs the argument(s) %s" % (name, ", ".join(missing))
    if any(not isinstance(args[k], str) for k in schema.get("properties", {}) if k in args):
        return None, "the arguments of %s must be strings" % name
    return {"id": "text-%d" % index, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}, None


def text_tool_calls(content, problems=None):
    """Tool calls small open models write as text: ```json fenced objects, Hermes/Qwen
    <tool_call> tags, or a bare JSON object naming a known tool. Parsed strictly: a call
    must name a known tool and carry its required string arguments; what is wrong with an
    attempt that fails is appended to `problems` (so the model can be told)."""
    if not content:
        return []
    candidates = _TAGGED.findall(content) + _FENCED.findall(content)
    stripped = content.strip()
    if not candidates and stripped.startswith("{") and stripped.endswith("}"):
        candidates = [stripped]
    calls = []
    for raw in candidates:
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        call, problem = _as_call(obj, len(calls))
        if call is not None:
            calls.append(call)
        elif problem and problems is not None:
            problems.append(problem)
    return calls


def _run(argv, stdin=None, timeout=SHELL_TIMEOUT, cwd=None):
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, cwd=cwd)
        out = (proc.stdout + proc.stderr)[-OUTPUT_CAP:]
        return out, proc.returncode
    except subprocess.TimeoutExpired:
        return "timed out after %ds" % timeout, 124


def run_tool(name, args, workdir):
    if name == "shell":
        return _run(["sh", "-c", args.get("command", "")], cwd=workdir)
    if name == "read_file":
        try:
            with open(os.path.join(workdir, args["path"]), encoding="utf-8", errors="replace") as handle:
                return handle.read(OUTPUT_CAP), 0
        except OSError as exc:
            return str(exc), 1
    if name == "write_file":
        try:
            path = os.path.join(workdir, args["path"])
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(args.get("content", ""))
            return "wrote %s" % args["path"], 0
        except OSError as exc:
            return str(exc), 1
    if name == "mem_ls":
        return _run(["mem", "ls"])
    if name == "mem_get":
        return _run(["mem", "get", args.get("slug", "")])
    if name == "mem_set":
        return _run(["mem", "set", args.get("slug", ""), "-"], stdin=args.get("value", ""))
    if name == "chan_read":
        return _run(["chan", "read"])
    if name == "chan_reply":
        return _run(["chan", "reply", args.get("message_id", ""), "-"], stdin=args.get("text", ""))
    return "unknown tool %s" % name, 127


def instruction_from_relay():
    if not os.environ.get("ORCHESTRA_RELAY_URL"):
        return None
    try:
        import orchestra_client as relay
        client = relay.Client()
        me = client.whoami()["pubkey"]
        asks = [m for m in client.messages() if m["author_role"] == "user" and me in m["mentioned_pubkeys"]]
    except Exception as exc:  # the file is still there
        sys.stderr.write("relay unavailable: %s\n" % exc)
        return None
    if not asks:
        return None
    return "[message %s from the user]\n%s" % (asks[-1]["id"], asks[-1]["content"])


def chat(messages, generation, deadline):
    url = os.environ["ORCHESTRA_MODEL_URL"].rstrip("/") + "/chat/completions"
    body = dict(generation)
    body.update(model=os.environ.get("ORCHESTRA_MODEL", "default"), messages=messages,
                tools=[{"type": "function", "function": t} for t in TOOLS])
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Content-Type": "application/json", "Authorization": "Bearer " + os.environ.get("ORCHESTRA_MODEL_TOKEN", "")})
    timeout = max(5.0, min(180.0, deadline - time.time() - DEADLINE_MARGIN / 2))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            reply = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read())["error"]
            detail = detail if isinstance(detail, dict) else {"message": str(detail)}
        except Exception:
            detail = {"message": exc.reason}
        raise EndpointError("%s (%s)" % (detail.get("message"), exc.code)) from None
    except urllib.error.URLError as exc:
        raise EndpointError("endpoint unreachable: %s" % exc.reason) from None
    except (TimeoutError, socket.timeout):
        raise EndpointError("endpoint timed out after %.0f s" % timeout) from None
    except (OSError, ValueError) as exc:
        raise EndpointError("bad reply from the endpoint: %s" % exc) from None
    try:
        reply["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        raise EndpointError("bad reply from the endpoint: no choices[0].message") from None
    return reply


def _system_prompt():
    """The manifest's prompt (its path in ORCHESTRA_PROMPT_FILE, hash checked by the host),
    else the built-in one."""
    path = os.environ.get("ORCHESTRA_PROMPT_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except OSError as exc:
            sys.stderr.write("prompt file unreadable (%s); using the built-in prompt\n" % exc)
    return SYSTEM


def main():
    try:
        return _main()
    except Exception as exc:  # never leave the trajectory without a closing event
        trajectory.event("text", "agent crashed: %s: %s" % (exc.__class__.__name__, exc))
        sys.stderr.write("agent crashed: %s: %s\n" % (exc.__class__.__name__, exc))
        return 1


def _main():
    workdir = os.environ.get("ORCHESTRA_WORKDIR", os.getcwd())
    deadline = float(os.environ.get("ORCHESTRA_DEADLINE", time.time() + 3600))
    generation = json.loads(os.environ.get("ORCHESTRA_GENERATION") or "{}")
    if "max_output_tokens" in generation:
        generation["max_tokens"] = generation.pop("max_output_tokens")
    max_turns = int(generation.pop("max_turns", 50))
    no_memory = os.environ.get("ORCHESTRA_NO_MEMORY") == "1"
    instruction = instruction_from_relay()
    if instruction is None:
        with open("/logs/agent/instruction.md", encoding="utf-8") as handle:
            instruction = handle.read()
    system, user = _system_prompt(), instruction
    if not no_memory:
        facts = memory.load_facts(workdir=workdir)
        pins = memory.pinned(facts)
        if pins:
            system += "\n\nRules you always follow:\n" + memory.render(pins)
        recallable = [f for f in facts if f not in pins]
        hits, suppressed = memory.recall(instruction, recallable)
        block = memory.render(hits)
        shadow = {"retriever": memory.SHADOW_RETRIEVER, "top1": memory.shadow_top1(instruction, recallable)}
        trajectory.memory_recall([h["id"] for h in pins + hits], len(block) + len(memory.render(pins)), suppressed,
                                 top1=hits[0]["id"] if hits else None, shadow=shadow)
        if block:
            user = "<recall>\n%s\n</recall>\n\n%s" % (block, instruction)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    trajectory.event("message", instruction)
    truncated = invalid = repeats = 0
    last_calls = None
    for _turn in range(max_turns):
        if time.time() > deadline - DEADLINE_MARGIN:
            trajectory.event("text", "stopped: deadline near")
            return EXIT_DEADLINE
        try:
            response = chat(messages, generation, deadline)
        except EndpointError as exc:
            trajectory.event("text", "endpoint error: %s" % exc)
            sys.stderr.write("endpoint error: %s\n" % exc)
            return EXIT_BUDGET if "budget exceeded" in str(exc) else EXIT_ENDPOINT
        choice = response["choices"][0]
        message = choice["message"]
        problems = []
        calls = message.get("tool_calls") or text_tool_calls(message.get("content"), problems)
        if calls and not message.get("tool_calls"):  # a text tool call, made native
            message = {"role": "assistant", "content": message.get("content") or "",
                       "tool_calls": calls}
        messages.append({k: v for k, v in message.items() if v is not None})
        if not calls and choice.get("finish_reason") == "length":
            # cut at max_tokens: not an answer; ask for the rest (bounded by max_turns)
            trajectory.event("text", "reply cut at max_tokens (finish_reason length); continuing")
            truncated += 1
            messages.append({"role": "user", "content": "Your reply was cut off. Continue; "
                             "if you meant to call a tool, send only the tool call."})
            continue
        if not calls and problems and invalid < MAX_INVALID_CALLS:
            # a tool call written as text that does not fit the tools: say what is wrong
            invalid += 1
            trajectory.event("text", "invalid tool call: %s" % "; ".join(problems))
            messages.append({"role": "user", "content": "That tool call was not valid: %s. "
                             "Send a valid tool call, or your final answer." % "; ".join(problems)})
            continue
        if not calls:
            trajectory.event("message", message.get("content") or "")
            print(message.get("content") or "")
            return 0
        signature = [(c["function"]["name"], c["function"].get("arguments")) for c in calls]
        repeats = repeats + 1 if signature == last_calls else 1
        last_calls = signature
        if repeats >= MAX_REPEATS:
            trajectory.event("text", "stopped: the model sent the same tool call(s) %d turns in a row" % repeats)
            return EXIT_STEP_LIMIT
        for call in calls:
            name = call["function"]["name"]
            try:
                args = json.loads(call["function"].get("arguments") or "{}")
            except ValueError:
                args = {}
            tool = {"id": call.get("id") or "call", "name": name, "args": args}
            trajectory.event("tool_dispatch", tool=tool)
            output, code = run_tool(name, args, workdir)
            trajectory.event("tool_result", tool=dict(tool, output=output, err="" if code == 0 else "exit %d" % code,
                                                      exit_code=code))
            messages.append({"role": "tool", "tool_call_id": tool["id"], "content": output})
        if repeats >= 2:  # a small model re-sending a finished step: say so once per turn
            messages.append({"role": "user", "content": "You sent this same tool call before and it "
                             "ran. If the task is done, reply with your final answer and no tool call."})
    trajectory.event("text", "stopped: max_turns reached" + (
        " (%d replies cut at max_tokens)" % truncated if truncated else ""))
    return EXIT_STEP_LIMIT
