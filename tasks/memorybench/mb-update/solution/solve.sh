#!/bin/bash
# Oracle: recall the task's memory like an agent would (the `recall` tool of the agent
# stack, which records a memory_recall event), then act on what came back. In the
# memory-off arm recall returns nothing, so memory-dependent tasks fail.
set -u
cd /app
url=$(recall "current API base URL" | grep -o "https://api.v[0-9]*.example replaced" | head -1 | cut -d" " -f1)
traj tool shell "echo $url > answer.txt (MEMKEY-UPD9K)"
echo "$url" > answer.txt
