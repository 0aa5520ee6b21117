"""A trial's ATIF (trial/atif.py) from each source a trial folder can hold: the agent's
trajectory matched to the model calls, the model calls alone (in each API's shape), the
command of an agent without a model, nothing at all; and agent data that does not fit."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.models.atif import FILE_NAME, Trajectory
from orchestrator.trial.atif import MAX_TEXT, TrialFacts, build_atif, write_atif

INSTRUCTION = "Write hello to /app/hello.txt.\n"


def facts(**kw: object) -> TrialFacts:
    return TrialFacts(**{"trial_id": "t" * 64, "agent": "reference", "agent_version": "0.1.0", **kw})  # type: ignore[arg-type]


def folder(tmp_path: Path, events: list[dict] | None = None, exchanges: list[dict] | None = None,
           **files: str) -> tuple[Path, Path]:
    agent = tmp_path / "agent"
    agent.mkdir(parents=True)
    (agent / "instruction.md").write_text(INSTRUCTION)
    if events is not None:
        (agent / "trajectory.jsonl").write_text("".join(json.dumps({"seq": i, **e}) + "\n"
                                                        for i, e in enumerate(events)))
    for name, text in files.items():
        (agent / name.replace("_", ".")).write_text(text)
    record = tmp_path / "model" / "exchanges.jsonl"
    if exchanges is not None:
        record.parent.mkdir(parents=True)
        record.write_text("".join(json.dumps(x) + "\n" for x in exchanges))
    return agent, record


def chat(seq: int, content: str | None, calls: list[tuple[str, str, dict]] = (),  # type: ignore[assignment]
         results: list[tuple[str, str]] = (), usage: tuple[int, int] = (100, 10), **extra: object) -> dict:  # type: ignore[assignment]
    messages = [{"role": "user", "content": INSTRUCTION}]
    messages += [{"role": "tool", "tool_call_id": i, "content": out} for i, out in results]
    message = {"role": "assistant", "content": content, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, n, a in calls] or None}
    return {"seq": seq, "started": 1_700_000_000 + seq, "seconds": 1.0, "status": 200, **extra,
            "request": {"model": "orchestra-model", "messages": messages, "tools": [
                {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]},
            "response": {"model": "qwen-0.5b", "choices": [{"message": message, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                   "prompt_tokens_details": {"cached_tokens": 40}}}}


def event(kind: str, text: str = "", **tool: object) -> dict:
    return {"event": {"kind": kind, "text": text, **({"tool": tool} if tool else {})}}


def test_the_reference_agents_trajectory_is_matched_to_its_model_calls(tmp_path: Path) -> None:
    events = [{"memory_recall": {"hits": [{"id": "m1"}], "used_chars": 12, "suppressed": 0}},
              event("message", INSTRUCTION),  # the agent notes the instruction: step 1 already
              event("tool_dispatch", id="c1", name="bash", args={"cmd": "ls"}),
              event("tool_result", id="c1", name="bash", output="a.txt", err="", exit_code=0),
              event("tool_dispatch", id="c2", name="write", args={"path": "/app/hello.txt"}),
              event("tool_result", id="c2", name="write", output="ok", err="exit 1", exit_code=1),
              event("tool_dispatch", id="c3", name="bash", args={"cmd": "cat /app/hello.txt"}),
              event("tool_result", id="c3", name="bash", output="hello", exit_code=0),
              event("message", "Done."), event("text", "stopped: max_turns reached")]
    exchanges = [chat(1, None, [("c1", "bash", {"cmd": "ls"}), ("c2", "write", {"path": "/app/hello.txt"})]),
                 chat(2, "Let me check.", [("c3", "bash", {"cmd": "cat /app/hello.txt"})],
                      results=[("c1", "a.txt"), ("c2", "ok")], api="chat", asked_model="gpt-x"),
                 chat(3, "Done.", usage=(300, 5)),
                 {"seq": 4, "status": 429, "request": {}, "response": {"error": {"message": "budget"}}}]
    agent, record = folder(tmp_path, events, exchanges)
    doc = build_atif(agent, record, facts())
    assert [s.source for s in doc.steps] == ["user", "system", "agent", "agent", "agent", "system"]
    assert doc.steps[0].message == INSTRUCTION and doc.steps[1].extra == {"memory_recall": events[0]["memory_recall"]}
    one, two, done = doc.steps[2:5]
    assert [c.tool_call_id for c in one.tool_calls or []] == ["c1", "c2"]  # one model call, one step
    assert [(r.source_call_id, r.content, r.extra) for r in one.observation.results] == [  # type: ignore[union-attr]
        ("c1", "a.txt", {"exit_code": 0}), ("c2", "ok", {"err": "exit 1", "exit_code": 1})]
    assert [c.tool_call_id for c in two.tool_calls or []] == ["c3"] and two.llm_call_count == 1
    assert done.message == "Done." and done.metrics.prompt_tokens == 300  # type: ignore[union-attr]
    assert one.timestamp == "2023-11-14T22:13:21Z" and one.metrics.cached_tokens == 40  # type: ignore[union-attr]
    assert doc.agent.model_name == "qwen-0.5b" and one.model_name is None  # the default is the agent's
    assert doc.final_metrics.total_prompt_tokens == 500 and doc.final_metrics.total_completion_tokens == 25  # type: ignore[union-attr]
    assert doc.final_metrics.total_steps == 6 and doc.extra["source"] == "agent trajectory"  # type: ignore[union-attr,index]
    assert "1 model calls had no answer" in (doc.notes or "")
    assert doc.session_id == "t" * 64 and doc.schema_version == "ATIF-v1.7"
    assert [t["function"]["name"] for t in doc.agent.tool_definitions or []] == ["bash"]


def test_without_a_trajectory_the_model_calls_are_the_steps(tmp_path: Path) -> None:
    exchanges = [chat(1, "I'll look.", [("a", "bash", {"cmd": "ls"})]),
                 chat(2, None, [("b", "bash", {"cmd": "echo hello > /app/hello.txt"})], results=[("a", "x")]),
                 chat(3, "Done.", results=[("a", "x"), ("b", "")])]  # the whole history again
    agent, record = folder(tmp_path, exchanges=exchanges)
    doc = build_atif(agent, record, facts(agent="aider", agent_version="0.86.2"))
    assert [s.source for s in doc.steps] == ["user", "agent", "agent", "agent"]
    assert [len(s.observation.results) if s.observation else 0 for s in doc.steps] == [0, 1, 1, 0]
    assert doc.steps[2].tool_calls[0].arguments == {"cmd": "echo hello > /app/hello.txt"}  # type: ignore[index]
    assert all(s.llm_call_count == 1 for s in doc.steps[1:]) and doc.extra["source"] == "model exchanges"  # type: ignore[index]
    assert "after its last call" in (doc.notes or "")


def test_each_apis_answer_is_read(tmp_path: Path) -> None:
    messages = {"model": "claude-x", "content": [
        {"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "ok"},
        {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {"command": "ls"}}],
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 7}}
    responses = {"model": "gpt-x", "output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "function_call", "call_id": "fc1", "name": "shell", "arguments": '{"command": ["ls"]}'},
        {"type": "message", "content": [{"type": "output_text", "text": "hi"}]}],
        "usage": {"input_tokens": 50, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 20}}}
    gemini = {"modelVersion": "gemini-x", "candidates": [{"content": {"parts": [
        {"text": "plan", "thought": True}, {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}]}}],
        "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 3}}
    requests = [{}, {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "a.txt"}]}]}]},
        {"input": [{"type": "function_call_output", "call_id": "fc1", "output": "b.txt"}]},
        {"contents": [{"role": "user", "parts": [{"functionResponse": {  # answered by name
            "name": "run_shell_command", "response": {"output": "c.txt"}}}]}]}]
    exchanges = [{"seq": i, "api": api, "status": 200, "request": req, "response": resp}
                 for i, (api, req, resp) in enumerate(zip(("messages", "responses", "gemini", "gemini"),
                                                          requests, (messages, responses, gemini, gemini),
                                                          strict=True))]
    agent, record = folder(tmp_path, exchanges=exchanges)
    doc = build_atif(agent, record, facts())
    claude, gpt, gem, _ = doc.steps[1:]
    assert (claude.message, claude.reasoning_content, claude.metrics.prompt_tokens,  # type: ignore[union-attr]
            claude.metrics.cached_tokens) == ("ok", "hmm", 100, 90)  # type: ignore[union-attr]
    assert claude.observation.results[0].content == "a.txt"  # type: ignore[union-attr]
    assert gpt.tool_calls[0].arguments == {"command": ["ls"]} and gpt.reasoning_content == "think"  # type: ignore[index]
    assert gpt.observation.results[0].source_call_id == "fc1" and gpt.model_name == "gpt-x"  # type: ignore[union-attr]
    assert doc.agent.model_name == "gemini-x" and gem.model_name is None  # the most used: the agent's
    assert claude.model_name == "claude-x"
    assert gem.tool_calls[0].tool_call_id == "call-3-1" and gem.metrics.completion_tokens == 3  # type: ignore[index,union-attr]
    assert [(r.source_call_id, r.content) for r in gem.observation.results] == [  # type: ignore[union-attr]
        ("call-3-1", '{"output": "c.txt"}')]


def test_the_oracle_is_one_deterministic_step(tmp_path: Path) -> None:
    agent, record = folder(tmp_path, stdout_txt="wrote /app/hello.txt\n", stderr_txt="warning\n")
    doc = build_atif(agent, record, facts(agent="oracle", command="bash /solution/solve.sh", exit_code=0))
    assert [s.source for s in doc.steps] == ["user", "agent"]
    step = doc.steps[1]
    assert step.llm_call_count == 0 and step.metrics is None
    assert step.tool_calls[0].arguments == {"command": "bash /solution/solve.sh"}  # type: ignore[index]
    assert step.observation.results[0].content == "wrote /app/hello.txt\n"  # type: ignore[union-attr]
    assert step.observation.results[0].extra == {"exit_code": 0, "stderr": "warning\n"}  # type: ignore[union-attr]
    assert doc.extra["source"] == "agent command" and doc.final_metrics.total_prompt_tokens is None  # type: ignore[index,union-attr]
    refused = build_atif(agent, record, facts(agent="aider", command="sh run.sh", exit_code=4, had_model=True))
    assert refused.steps[1].llm_call_count is None and "no model call of it was answered" in (refused.notes or "")


def test_nop_is_the_instruction_alone(tmp_path: Path) -> None:
    agent, record = folder(tmp_path)
    doc = write_atif(agent, record, facts(agent="nop"))
    assert [s.source for s in doc.steps] == ["user"] and doc.extra["source"] == "none"  # type: ignore[index]
    written = json.loads((agent / FILE_NAME).read_text())
    assert "model_name" not in written["agent"] and written["steps"][0] == {
        "step_id": 1, "source": "user", "message": INSTRUCTION}  # absent fields are left out
    assert Trajectory.model_validate(written) == doc


def test_agent_data_that_does_not_fit_is_left_out_not_an_error(tmp_path: Path) -> None:
    huge = "x" * (MAX_TEXT + 10)
    agent, record = folder(tmp_path, events=[
        event("tool_result", id="nobody", output="orphan"),  # a result with no call anywhere
        event("tool_dispatch", name=None, args="not json {"),  # no id, no name, args a string
        event("tool_dispatch", id=7, name="bash", args=[1, 2]),
        event("tool_result", id=7, output={"nested": True}),
        event("message", huge), event("weird"), {"event": "not an object"}],
        exchanges=[{"seq": 1, "request": None, "response": None, "omitted_bytes": 9_000_000},
                   {"seq": 2, "status": 200, "request": "text", "response": {"choices": "no"}}])
    with open(agent / "trajectory.jsonl", "a") as handle:
        handle.write("{bad json\n[1, 2]\n" + "[" * 100_000 + "\n")
    (agent / "instruction.md").unlink()
    doc = build_atif(agent, record, facts())
    assert doc.steps[0].source == "system" and "not collected" in doc.steps[0].message
    assert doc.steps[1].source == "system" and doc.steps[1].observation.results[0].content == "orphan"  # type: ignore[union-attr]
    calls = doc.steps[2].tool_calls or []
    assert [(c.tool_call_id, c.function_name, c.arguments) for c in calls] == [
        ("call-1", "", {"input": "not json {"}), ("7", "bash", {"input": [1, 2]})]
    assert doc.steps[2].observation.results[0].content == '{"nested": true}'  # type: ignore[union-attr]
    assert doc.steps[3].message.endswith("characters]") and len(doc.steps[3].message) < MAX_TEXT + 100
    assert "5 lines of the agent's trajectory were not events" in (doc.notes or "")
    Trajectory.model_validate_json(doc.to_json())  # what is written reads back


def test_report_atif_copies_what_collection_wrote_and_builds_what_is_missing(tmp_path: Path) -> None:
    from orchestrator.models.result import TrialResult
    from orchestrator.report.atif import UNKNOWN_COMMAND, export_atif

    job = tmp_path / "job"
    for name, exit_code in (("new", None), ("old", 0), ("broken", None)):
        trial = job / "trials" / name
        agent, _ = folder(trial)
        result = TrialResult(trial_id=name * 8, job="job", task="examples/hello-file", task_path="x",
                             content_hash="h", condition="c", condition_hash="ch", agent="oracle",
                             attempt=1, agent_exit_code=exit_code)
        (trial / "result.json").write_text(result.model_dump_json())
    write_atif(job / "trials/new/agent", job / "trials/new/model/exchanges.jsonl", facts(trial_id="n" * 24))
    (job / "trials/broken/agent" / FILE_NAME).write_text('{"steps": []}')
    (job / "trials/stray").mkdir()
    export = export_atif(job, tmp_path / "out")
    assert export.copied == ["new.json"] and export.written == 3
    assert [b.split(":")[0] for b in export.built] == ["broken.json", "old.json"]
    assert "did not read as ATIF" in export.built[0] and export.problems[0].startswith("stray: ")
    old = Trajectory.model_validate_json((tmp_path / "out/old.json").read_text())
    assert old.steps[1].tool_calls[0].arguments == {"command": UNKNOWN_COMMAND}  # type: ignore[index]
    assert (tmp_path / "out/new.json").read_bytes() == (job / "trials/new/agent" / FILE_NAME).read_bytes()


def test_a_trajectory_orchestra_made_from_the_calls_gives_way_to_the_calls(tmp_path: Path) -> None:
    from orchestrator.services.exchanges import read_exchanges, trajectory_from_exchanges

    exchanges = [chat(1, "I'll look.", [("a", "bash", {"cmd": "ls"})]), chat(2, "Done.", results=[("a", "x")])]
    agent, record = folder(tmp_path, exchanges=exchanges)
    made = trajectory_from_exchanges(read_exchanges(record))  # what agents/installed.py writes
    (agent / "trajectory.jsonl").write_text("".join(json.dumps(e) + "\n" for e in made))
    assert build_atif(agent, record, facts()).extra["source"] == "model exchanges"  # type: ignore[index]
    with open(agent / "trajectory.jsonl", "a") as handle:  # the agent's own events: its trajectory
        handle.write(json.dumps({"seq": 9, "event": {"kind": "text", "text": "mine"}}) + "\n")
    assert build_atif(agent, record, facts()).extra["source"] == "agent trajectory"  # type: ignore[index]


def test_what_json_cannot_hold_is_replaced_in_the_written_file(tmp_path: Path) -> None:
    agent, record = folder(tmp_path)
    (agent / "trajectory.jsonl").write_text(
        '{"event": {"kind": "tool_dispatch", "tool": {"id": "a", "name": "x", "args": {"v": NaN, "w": 1e999}}}}\n'
        '{"event": {"kind": "tool_result", "tool": {"id": "a", "output": "\\ud800 lone"}}}\n')
    write_atif(agent, record, facts())
    written = (agent / FILE_NAME).read_text(encoding="utf-8")  # strict UTF-8, strict JSON
    doc = json.loads(written, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert doc["steps"][1]["tool_calls"][0]["arguments"] == {"v": None, "w": None}
    assert doc["steps"][1]["observation"]["results"][0]["content"] == "\ufffd lone"


def test_a_later_step_of_a_multi_step_task_has_only_its_own_model_calls(tmp_path: Path) -> None:
    from orchestrator.trial.atif import _earlier_steps_end

    trial = tmp_path / "trial"
    first, _ = folder(trial / "steps" / "one")
    second, _ = folder(trial / "steps" / "two")
    assert _earlier_steps_end(second) is None and _earlier_steps_end(trial / "agent") is None
    (first / FILE_NAME).write_text("{}")
    ended = _earlier_steps_end(second)
    assert ended is not None and _earlier_steps_end(first) is None
    record = trial / "model" / "exchanges.jsonl"
    record.parent.mkdir()
    calls = [chat(1, "step one"), chat(2, "step two")]
    calls[0]["started"], calls[1]["started"] = ended - 5, ended + 1
    record.write_text("".join(json.dumps(c) + "\n" for c in calls))
    doc = build_atif(second, record, facts(since=ended))
    assert [s.message for s in doc.steps[1:]] == ["step two"] and doc.final_metrics.extra["model_calls"] == 1  # type: ignore[union-attr,index]


def test_tool_calls_the_agents_log_names_its_own_way_are_matched_by_tool_and_arguments(tmp_path: Path) -> None:
    events = [event("tool_dispatch", id="run_shell_command_17_0", name="run_shell_command", args={"command": "ls"}),
              event("tool_result", id="run_shell_command_17_0", output="a.txt"),
              event("tool_dispatch", id="run_shell_command_18_0", name="run_shell_command", args={"command": "ls"}),
              event("tool_result", id="run_shell_command_18_0", output="a.txt"), event("message", "Done.")]
    exchanges = [chat(1, None, [("call_x", "run_shell_command", {"command": "ls"})], usage=(100, 1)),
                 chat(2, None, [("call_y", "run_shell_command", {"command": "ls"})], usage=(200, 2)),
                 chat(3, "Done.", usage=(300, 3))]
    agent, record = folder(tmp_path, events, exchanges)
    doc = build_atif(agent, record, facts())
    assert [(s.llm_call_count, s.metrics.prompt_tokens) for s in doc.steps[1:]] == [  # type: ignore[union-attr]
        (1, 100), (1, 200), (1, 300)]  # the same call twice: two turns, each its own
    assert doc.notes is None
