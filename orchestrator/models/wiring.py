"""orchestra's wiring: the environment variables orchestra itself sets (or unsets) in an
agent's or verifier's container, in one place (DESIGN 3.3, 4).

A dataset never sets these: a compose file's `environment:` and a task's `verifier.env`
lose them (dropped, with a note; tasks/compose.py, trial/verify.py), so model calls cannot
be pointed past the proxy, its budget and its record, nor egress past the egress proxy,
nor trust past the CA bundle. An endpoint's `env` may not set them either (nor PATH and
HOME: models/endpoint.py). tests/unit/test_wiring.py reads every variable the
agent adapters, the trial's phases and the per-trial services set and fails when one is
missing here: a newly wired variable is forbidden to datasets from the commit that wires it.

PATH, HOME, PYTHONPATH and USER are the exception: an adapter's script extends or relocates them
for its own process (which overrides whatever the container holds), and a task's image and
compose file legitimately set them for its own tools and test.sh.
"""

from __future__ import annotations

from collections.abc import Iterable

WIRING_PREFIXES = ("ORCHESTRA_",)  # the relay, the model proxy, the memory state, the trial's own

# Model APIs: the proxy's address and token, in each API's and each agent CLI's names
MODEL_API = frozenset({
    "OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL",
    "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
    "GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY", "GEMINI_MODEL", "GOOGLE_API_KEY",
    "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA", "GOOGLE_APPLICATION_CREDENTIALS",
    "LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL",  # OpenHands (LiteLLM)
})
# Egress: the egress proxy on the gateway (services/egress.py), both cases
EGRESS = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"})
# Trust: the CA bundle (trial/trust.py CA_VARIABLES)
TRUST = frozenset({"SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                   "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"})
# The trial's scratch space (tasks/memory.py)
SCRATCH = frozenset({"TMPDIR"})
# What the agent adapters' scripts set for their CLIs (config homes, telemetry, retries)
AGENT_CLIS = frozenset({
    "CODEX_HOME",
    "CLAUDE_CONFIG_DIR", "CLAUDE_CODE_DISABLE_AUTO_MEMORY", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "CLAUDE_CODE_MAX_RETRIES", "DISABLE_AUTOUPDATER", "DISABLE_ERROR_REPORTING", "DISABLE_TELEMETRY",
    "IS_SANDBOX",
    "GEMINI_CLI_HOME", "GEMINI_CLI_NO_RELAUNCH", "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
    "GEMINI_CLI_TRUST_WORKSPACE",
    "QWEN_CODE_NO_RELAUNCH", "QWEN_CODE_SYSTEM_SETTINGS_PATH", "QWEN_HOME",
    "OPENCODE_CONFIG", "OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_LSP_DOWNLOAD",
    "OPENCODE_DISABLE_MODELS_FETCH", "OPENCODE_DISABLE_SHARE",
    "AIDER_ANALYTICS_DISABLE", "AIDER_CHECK_UPDATE", "LITELLM_LOCAL_MODEL_COST_MAP",
    "MSWEA_CONFIGURED", "MSWEA_COST_TRACKING", "MSWEA_GLOBAL_CONFIG_DIR",
    "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "MSWEA_SILENT_STARTUP",
    "LLM_NATIVE_TOOL_CALLING", "LLM_NUM_RETRIES", "LLM_DROP_PARAMS", "LLM_CACHING_PROMPT",
    "LLM_LOG_COMPLETIONS", "RUNTIME", "SKIP_DEPENDENCY_CHECK", "RUN_AS_OPENHANDS", "SU_TO_USER",
    "SANDBOX_VOLUMES", "AGENT_ENABLE_BROWSING", "ENABLE_BROWSER", "AGENT_ENABLE_JUPYTER",
    "AGENT_ENABLE_PROMPT_EXTENSIONS", "AGENT_ENABLE_MCP", "MAX_ITERATIONS", "FILE_STORE",
    "FILE_STORE_PATH", "SAVE_TRAJECTORY_PATH", "OPENHANDS_SUPPRESS_BANNER", "DO_NOT_TRACK",
    "PYTHONPYCACHEPREFIX",
})
WIRING_NAMES = MODEL_API | EGRESS | TRUST | SCRATCH | AGENT_CLIS
# set by adapters for their own process only; a task's own (see above)
PROCESS_NAMES = frozenset({"PATH", "HOME", "PYTHONPATH", "USER"})


def is_wiring(name: str) -> bool:
    """A variable orchestra sets itself in an agent's or verifier's container, which no
    dataset environment may set."""
    return name.startswith(WIRING_PREFIXES) or name in WIRING_NAMES


def wiring_in(names: Iterable[str]) -> list[str]:
    """The wiring variables among `names` (a mapping's keys, or an image's `NAME=value`
    ENV lines), in order: what a dataset's environment may not set."""
    keys = [name.split("=", 1)[0] for name in names]
    return [k for k in keys if is_wiring(k)]
