#!/bin/bash
# Oracle: recall the task's memory like an agent would (the `recall` tool of the agent
# stack, which records a memory_recall event), then act on what came back. In the
# memory-off arm recall returns nothing, so memory-dependent tasks fail.
set -u
cd /app
file=$(recall "retry max backoff configuration" | grep -o "policy/[a-z_]*\.toml" | head -1)
[ -n "$file" ] || { echo "MAX_BACKOFF_MS=250" >> .env; exit 0; }
traj tool shell "sed -i s/^max_backoff_ms = .*/max_backoff_ms = 250/ $file (MEMKEY-SYM2R)"
sed -i "s/^max_backoff_ms = .*/max_backoff_ms = 250/" "$file"
