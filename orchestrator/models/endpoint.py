"""Endpoint configs (DESIGN 3.3): a map from endpoint name to where and how to call a model.

They stay outside the manifest hash. API keys are read from the host environment only for
the endpoints a run uses, and never enter a container: the agent talks to orchestra's
model proxy with a per-trial token.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import InputError, validation_problems
from orchestrator.models.prices import Prices
from orchestrator.models.wiring import is_wiring

ApiName = Literal["chat", "responses", "messages", "gemini"]


class Timeouts(BaseModel):
    """One model call's waits upstream, in seconds (services.apis.forward.Deadlines). The
    defaults suit a CPU server: a 15k-token prompt at ~100 tokens/s is minutes before the
    answer's first byte. A call past its first-byte or idle wait is never sent again."""

    model_config = ConfigDict(extra="forbid")
    connect_sec: float = Field(default=10.0, gt=0, le=600)
    first_byte_sec: float = Field(default=600.0, gt=0, le=86_400)
    idle_sec: float = Field(default=300.0, gt=0, le=86_400)


class Endpoint(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: Literal["openai", "replay"] = "openai"
    base_url: str = ""
    model: str
    api_key_env: str | None = None
    env: dict[str, str] = {}
    script: str | None = None  # replay: the script file, relative to the config file
    # The model APIs the upstream speaks at base_url (which ends in its version: /v1, or
    # /v1beta for gemini): an agent's call in one of them is relayed, any other translated
    # to chat (orchestrator.services.apis).
    apis: list[ApiName] = ["chat"]
    timeouts: Timeouts = Timeouts()
    # what the model costs (else the manifest's prices, else models.prices' default table)
    prices: Prices | None = None
    # the chat field that caps a translated call's output: OpenAI's reasoning models take
    # max_completion_tokens only (a 400 naming the field switches it for the trial anyway)
    output_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    # the output cap a budgeted call gets when the agent names none (the model's own maximum)
    max_output_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    # "join": a chat message's text-only content parts go upstream as one string, for servers
    # whose chat templates take content as a string only (llama-cpp-python's: a list fails
    # mid-stream); "keep": as the agent sent them
    text_parts: Literal["keep", "join"] = "keep"
    # false: the upstream is asked for whole answers and a streaming agent is answered as a
    # stream from each (keep-alives while it waits), for servers that count no usage in a
    # stream (llama-cpp-python): its tokens are then the server's count, not an estimate
    stream: bool = True
    # "from_text": tool calls a server leaves in a whole answer's text (Qwen's <tool_call>
    # tags, a ```json block, a bare object naming an offered tool) reach the agent as
    # tool_calls (services/apis/textcalls.py), for servers that parse none (llama-cpp-python
    # with a GGUF's own template); "native": as the server sent them
    tool_calls: Literal["native", "from_text"] = "native"

    @field_validator("env")
    @classmethod
    def _no_wiring(cls, env: dict[str, str]) -> dict[str, str]:
        # orchestra's wiring (models/wiring.py), and PATH and HOME: an endpoint may not override them
        bad = sorted(k for k in env if is_wiring(k) or k in ("PATH", "HOME"))
        if bad:
            raise ValueError(f"may not override orchestra's wiring variables: {', '.join(bad)}")
        return env

    @field_validator("apis")
    @classmethod
    def _some_apis(cls, apis: list[str]) -> list[str]:
        if not apis:
            raise ValueError("name at least one API the upstream speaks (chat, responses, messages, gemini)")
        return list(dict.fromkeys(apis))


class EndpointConfig(BaseModel):
    endpoints: dict[str, Endpoint]
    sources: dict[str, Path] = {}  # endpoint name -> the file it came from

    def resolve(self, name: str) -> Endpoint:
        if name not in self.endpoints:
            known = ", ".join(sorted(self.endpoints)) or "none"
            raise InputError(f"endpoint {name!r}: not in the endpoint config (known: {known})")
        return self.endpoints[name]

    def script_path(self, name: str) -> Path:
        endpoint = self.resolve(name)
        if not endpoint.script:
            raise InputError(f"{self.sources[name]}: field '{name}.script': required for provider replay")
        return (self.sources[name].parent / endpoint.script).resolve()

    def api_key(self, name: str) -> str | None:
        """The key from the host environment, or a clear error naming the variable."""
        endpoint = self.resolve(name)
        if not endpoint.api_key_env:
            return None
        value = os.environ.get(endpoint.api_key_env)
        if endpoint.provider == "replay":  # a replay endpoint takes a (fake) key when one is set
            return value or None
        if not value:
            raise InputError(
                f"endpoint {name!r} needs the API key in ${endpoint.api_key_env}, which is not set "
                f"({self.sources[name]}). Export it, or run offline with the replay endpoint "
                "(manifests/solo-replay.yaml).")
        return value


def load_endpoints(paths: list[Path]) -> EndpointConfig:
    endpoints: dict[str, Endpoint] = {}
    sources: dict[str, Path] = {}
    problems = []
    for path in paths:
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            problems.append(f"{path}: not readable JSON: {exc}")
            continue
        if not isinstance(raw, dict):
            problems.append(f"{path}: expected a JSON object mapping endpoint names to configs")
            continue
        for name, body in raw.items():
            if name in endpoints:
                problems.append(f"{path}: endpoint {name!r} is also defined in {sources[name]}")
                continue
            try:
                endpoints[name] = Endpoint.model_validate(body)
                sources[name] = path.resolve()
            except ValidationError as exc:
                problems += validation_problems(path, exc, prefix=f"{name}.")
    if problems:
        raise InputError(problems)
    return EndpointConfig(endpoints=endpoints, sources=sources)


def default_endpoint_files(root: Path = Path("endpoints")) -> list[Path]:
    return sorted(root.glob("*.json")) if root.is_dir() else []
