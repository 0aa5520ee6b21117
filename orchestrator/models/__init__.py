"""orchestra's data at its boundaries, one module each; pydantic models validate what is read
from or written to a file (a bad one fails naming the file and the field):

- task: task.toml (Harbor's task format, a superset of it)
- manifest: the agent lineup and the condition it defines
- endpoint: endpoint configs (where and how a model is called)
- result: trial and job results (result.json)
- records: what a trial's phases and services record in its result, and the job's memory shadow
- jobconfig: a job folder's config.json (what --resume and the viewer read back)
- compare: `orchestra compare`'s paired comparison (compare*.json)
- evidence: relay-evidence.json (a relay trial's channel, graded by its tests)
- events: a job's lifecycle events for watchers (NamedTuples, not pydantic: in memory only)
- trajectory: an agent's trajectory.jsonl, read one way for every reader (plain functions)
- atif: the trajectory in Harbor's interchange format (agent/trajectory.atif.json)
"""
