"""The reference agent's reading of tool calls small open models write as text."""

from __future__ import annotations

import json
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "images/agent-stack/lib"))
import orchestra_agent as agent  # noqa: E402


def parse(content: str) -> tuple[list[dict], list[str]]:
    problems: list[str] = []
    calls = agent.text_tool_calls(content, problems)
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls], problems


def test_fenced_tagged_and_bare_calls_are_read():
    call = {"name": "shell", "arguments": {"command": "ls"}}
    assert parse("ok\n```json\n" + json.dumps(call) + "\n```") == ([("shell", {"command": "ls"})], [])
    assert parse("<tool_call>\n" + json.dumps(call) + "\n</tool_call>") == ([("shell", {"command": "ls"})], [])
    assert parse(json.dumps({"name": "read_file", "arguments": json.dumps({"path": "/a"})})) == (
        [("read_file", {"path": "/a"})], [])


def test_attempts_that_do_not_fit_the_tools_are_named_not_run():
    assert parse('```json\n{"name": "mem_write", "arguments": {"slug": "x"}}\n```') == (
        [], ["there is no tool 'mem_write' (tools: chan_read, chan_reply, mem_get, mem_ls, mem_set, "
             "read_file, shell, write_file)"])
    assert parse('<tool_call>{"name": "write_file", "arguments": {"path": "/a"}}</tool_call>') == (
        [], ["write_file needs the argument(s) content"])
    assert parse('{"name": "shell", "arguments": {"command": 3}}') == ([], ["the arguments of shell must be strings"])


def test_json_that_is_no_call_is_plain_text():
    assert parse('The config is ```json\n{"debug": true}\n```') == ([], [])
    assert parse("Done.") == ([], [])
