#!/bin/bash
# Oracle: recall the task's memory like an agent would (the `recall` tool of the agent
# stack, which records a memory_recall event), then act on what came back. In the
# memory-off arm recall returns nothing, so memory-dependent tasks fail.
set -u
cd /app
recall "add function util.py" >/dev/null
traj tool write_file "util.py"
printf "\n\ndef add(a, b):\n    return a + b\n" >> util.py
