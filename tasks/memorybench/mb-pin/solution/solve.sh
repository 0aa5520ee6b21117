#!/bin/bash
# Oracle: recall the task's memory like an agent would (the `recall` tool of the agent
# stack, which records a memory_recall event), then act on what came back. In the
# memory-off arm recall returns nothing, so memory-dependent tasks fail.
set -u
cd /app
header=$(recall --pinned | grep -o "# MEMKEY-[A-Z0-9]*" | head -1)
traj tool write_file "notes.txt: $header / hello"
if [ -n "$header" ]; then printf "%s\nhello\n" "$header" > notes.txt; else echo hello > notes.txt; fi
