"""Secrets never reach a file orchestra writes (DESIGN 2 step 4, 3.3).

Every secret orchestra hands out (relay private keys and auth tags, model-proxy tokens,
API keys) is registered here while its trial lives. Three places use the registry:

- the structlog processor: every event written to stderr or events.jsonl is scrubbed;
- `scrub_tree`: after collection, files copied out of a trial (stdout, trajectory,
  artifacts, declared files) are rewritten with each secret replaced;
- `scrub_json`: the relay evidence is scrubbed before it is written.

What is covered: each secret verbatim and reversed, wherever it appears, also inside a
longer word (issue 56: an agent that wrote `x<secret>` kept an 8-11 character secret out of
reach of whole-token matching). A value under MIN_TOKEN_LEN (8) characters cannot be
scrubbed without matching ordinary text by chance: `too_short` says so, and
where such a value would be given to a trial (an allowed host variable a dataset reads, an
endpoint's key) it is refused before anything starts; `register` refuses it too. A secret the agent split into pieces,
encoded (base64, hex of a hex key) or interleaved is not detected: that would need a
model of the agent's intent, and the secrets are per trial and die with it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, overload

from orchestrator.util import JsonObject, write_atomic

REDACTED = "[orchestra:redacted-secret]"
MIN_TOKEN_LEN = 8  # from this length a secret is replaced wherever it appears; shorter: refused
SCRUB_FILE_CAP = 64 * 1024 * 1024  # larger files are already cut at collection

_lock = threading.Lock()
_secrets: dict[str, int] = {}  # secret -> registrations (two trials may share an API key)


def too_short(value: str | None) -> bool:
    """A value (not empty) too short to scrub without matching ordinary text."""
    return bool(value) and len(value or "") < MIN_TOKEN_LEN


def refusal(value: str) -> str:
    """Why a too-short value is refused (the caller names the field)."""
    return (f"its value is {len(value)} characters; orchestra scrubs every secret it hands a trial "
            f"from every file the trial writes and cannot do that under {MIN_TOKEN_LEN} characters "
            "without matching ordinary text: use a longer value")


def register(*values: str | None) -> None:
    """Secrets of the trials now running (empty ones ignored); a too-short one is a
    ValueError: its callers refuse it earlier, naming where it came from."""
    short = [v for v in values if too_short(v)]
    if short:
        raise ValueError(f"a secret of {len(short[0] or '')} characters cannot be scrubbed")
    with _lock:
        for value in values:
            if value:
                _secrets[value] = _secrets.get(value, 0) + 1


def unregister(*values: str | None) -> None:
    with _lock:
        for value in values:
            if value in _secrets:
                _secrets[value] -= 1
                if _secrets[value] <= 0:
                    del _secrets[value]


def _forms(secrets: list[str]) -> list[str]:
    return [form for s in secrets if s for form in (s, s[::-1])]


def _holds(text: str, form: str) -> bool:
    return form in text


def scrub_text(text: str, secrets: list[str] | None = None) -> str:
    for form in _forms(secrets if secrets is not None else current()):
        if form in text:
            text = text.replace(form, REDACTED)
    return text


def _scrub_bytes(data: bytes, forms: list[str]) -> bytes:
    for form in forms:
        raw = form.encode()
        if raw in data:
            data = data.replace(raw, REDACTED.encode())
    return data


def current() -> list[str]:
    with _lock:
        return list(_secrets)


def found_in(text: str, secrets: list[str]) -> list[str]:
    """Which of `secrets` appear (verbatim or reversed) in text."""
    return [s for s in secrets if s and (_holds(text, s) or _holds(text, s[::-1]))]


@overload
def scrub_json(value: str, secrets: list[str]) -> str: ...
@overload
def scrub_json(value: list[Any], secrets: list[str]) -> list[Any]: ...
@overload
def scrub_json(value: JsonObject, secrets: list[str]) -> JsonObject: ...
@overload
def scrub_json(value: object, secrets: list[str]) -> object: ...
def scrub_json(value: object, secrets: list[str]) -> object:
    """A copy of a JSON value with every string scrubbed (of the same shape)."""
    if isinstance(value, str):
        return scrub_text(value, secrets)
    if isinstance(value, list):
        return [scrub_json(v, secrets) for v in value]
    if isinstance(value, dict):
        return {scrub_text(str(k), secrets): scrub_json(v, secrets) for k, v in value.items()}
    return value


def scrub_tree(root: Path, secrets: list[str]) -> list[str]:
    """Rewrite every regular file under root that holds a secret; returns their paths
    relative to root. Files are read whole up to SCRUB_FILE_CAP (collection caps them)."""
    forms = _forms(secrets)
    if not forms or not root.is_dir():
        return []
    scrubbed = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file() or path.stat().st_size > SCRUB_FILE_CAP:
                continue
            data = path.read_bytes()
            scrubbed_data = _scrub_bytes(data, forms)
            if scrubbed_data == data:
                continue
            write_atomic(path, scrubbed_data)
            scrubbed.append(str(path.relative_to(root)))
    return sorted(scrubbed)


def structlog_processor(_logger: object, _method: str, event_dict: JsonObject) -> JsonObject:
    """Scrub every string value of a log event of every registered secret."""
    secrets = current()
    if not secrets:
        return event_dict
    return {key: scrub_json(value, secrets) if isinstance(value, (str, list, dict)) else value
            for key, value in event_dict.items()}
