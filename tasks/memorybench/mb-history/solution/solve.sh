#!/bin/bash
# Oracle: recall the task's memory like an agent would (the `recall` tool of the agent
# stack, which records a memory_recall event), then act on what came back. In the
# memory-off arm recall returns nothing, so memory-dependent tasks fail.
set -u
cd /app
recall "server timeout" >/dev/null
traj tool shell "grep ^timeout_seconds config/server.conf > answer.txt"
grep "^timeout_seconds" config/server.conf > answer.txt
