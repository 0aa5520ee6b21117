"""environment/docker-compose.yaml (Harbor's sidecar services), the subset orchestra runs.

Harbor merges a task's compose file over its own, in which `main` is the agent's container
built from environment/Dockerfile. Here likewise: `main` is the agent's container (it may
add `environment`, named `volumes` and `depends_on`); every other service is a sidecar on
the trial's network, reachable by its service name, under the task's quotas, labelled and
removed with the trial like every orchestra container.

Supported per service: `image` or `build` (a context folder under environment/, optional
`dockerfile`), `command`, `entrypoint`, `environment` (map or list), `working_dir`,
`volumes` (named volumes only), `depends_on` (list, or map with `service_started` /
`service_healthy`), `healthcheck` (Docker's: test, interval, timeout, retries,
start_period). Top level: `services`, `volumes` (named, no options), `networks` (every
service is on the trial's one IPv4 network: `enable_ipv6` and `ipv6_address` are refused,
any other network option is said in the trial's notes as not applied). `${VAR}`,
`${VAR:-default}` and `$$` are interpolated, plus Harbor's CONTEXT_DIR (the environment
folder) and MAIN_IMAGE_NAME. At most MAX_SERVICES (32) services, their `depends_on` walked
without recursion. Anything else is refused by name: "orchestra cannot honour
`services.db.ports`", never ignored.

A dataset is untrusted (DESIGN 4): it reads a host variable only when the user listed its
name (`orchestra run --task-env NAME`, the manifest's `sandbox.task_env`; `allow_host_env`
sets the list for this process before tasks load). Any other `${VAR}` reads as its default
or empty, and the compose file's `notes` say so; the values it did read are kept in
`host_values` (never serialised) so the trial scrubs them from every file it writes (a value
too short to scrub, under 8 characters, is refused: exit 2 naming the file and field).
orchestra's wiring variables (every variable orchestra sets in an agent's or verifier's
container: ORCHESTRA_*, each model API's base URL and key, the egress proxy's, the CA
bundle's, TMPDIR, the agent CLIs' own; models/wiring.py holds the one list) are dropped from
every service's `environment`, with a note: the proxy, its budget and its record are
orchestra's, never the dataset's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from orchestrator.errors import InputError, validation_problems
from orchestrator.models import (
    MAX_HEALTH_RETRIES,
    MAX_HEALTH_STEP_SEC,
    MAX_HEALTH_WAIT_SEC,
    is_wiring,
)
from orchestrator.scrub import refusal, too_short
from orchestrator.tasks.inputs import MAX_YAML_BYTES, load_yaml, read_capped

# Harbor's docker backend reads exactly environment/docker-compose.yaml; a task's own data
# file called docker-compose.yml or compose.yaml there is just a file (its build context).
FILENAMES = ("docker-compose.yaml",)
SERVICE_KEYS = {"image", "build", "command", "entrypoint", "environment", "working_dir", "volumes", "expose",
                "depends_on", "healthcheck", "container_name", "networks"}
MAIN_KEYS = {"environment", "volumes", "depends_on", "build", "image", "command", "networks"}
_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_allowed_host_env: frozenset[str] = frozenset()
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|ms|m|s|us))+$")
MAX_SERVICES = 32  # main and sidecars: each is a container under the task's quotas
_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # Docker's rule for a volume's name


class ComposeHealthcheck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    test: list[str] | str
    interval: str = "30s"
    timeout: str = "30s"
    retries: int = Field(default=3, ge=0, le=MAX_HEALTH_RETRIES)
    start_period: str = "0s"

    @field_validator("interval", "timeout", "start_period")
    @classmethod
    def _bounded(cls, value: str, info: ValidationInfo) -> str:
        """A duration Docker reads, within the task healthcheck's caps: a sidecar's wait
        never keeps a job running without end."""
        most = MAX_HEALTH_WAIT_SEC if info.field_name == "start_period" else MAX_HEALTH_STEP_SEC
        if _ns(value) > most * 1e9:
            raise ValueError(f"{value!r} is longer than the limit of {most:g}s")
        return value

    @property
    def command(self) -> list[str]:
        return self.test if isinstance(self.test, list) else ["CMD-SHELL", self.test]

    def seconds(self, field: str) -> float:
        """interval, timeout or start_period in seconds."""
        return _ns(getattr(self, field)) / 1e9


class Build(BaseModel):
    model_config = ConfigDict(extra="forbid")
    context: str = "."
    dockerfile: str = "Dockerfile"


class Dependency(BaseModel):
    model_config = ConfigDict(extra="forbid")
    condition: Literal["service_started", "service_healthy"] = "service_started"


class Service(BaseModel):
    model_config = ConfigDict(extra="ignore")  # names checked before (refused by name)
    image: str | None = None
    build: Build | None = None
    command: list[str] | str | None = None
    entrypoint: list[str] | str | None = None
    environment: dict[str, str] = {}
    working_dir: str | None = None
    volumes: list[str] = []
    depends_on: dict[str, Dependency] = {}
    healthcheck: ComposeHealthcheck | None = None

    @field_validator("build", mode="before")
    @classmethod
    def _build(cls, value: object) -> object:
        return {"context": value} if isinstance(value, str) else value

    @field_validator("environment", mode="before")
    @classmethod
    def _environment(cls, value: list[object] | dict[str, object] | None) -> dict[str, str]:
        if isinstance(value, list):
            pairs = [str(item).partition("=") for item in value]
            return {k: v for k, _, v in pairs}
        return {k: "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in (value or {}).items()}

    @field_validator("depends_on", mode="before")
    @classmethod
    def _depends(cls, value: object) -> object:
        return {name: {} for name in value} if isinstance(value, list) else value

    @field_validator("volumes")
    @classmethod
    def _named_only(cls, volumes: list[str]) -> list[str]:
        for volume in volumes:
            source, _, target = volume.partition(":")
            if not target or source.startswith((".", "/", "~", "$")):
                raise ValueError(f"{volume!r}: only named volumes (name:/path) are supported")
        return volumes


class Compose(BaseModel):
    services: dict[str, Service]
    volumes: list[str] = []
    notes: list[str] = []  # host variables not read, wiring variables dropped
    host_values: dict[str, str] = Field(default={}, exclude=True, repr=False)  # read from the host

    @property
    def main(self) -> Service:
        return self.services.get("main") or Service()

    @property
    def sidecars(self) -> dict[str, Service]:
        return {name: s for name, s in self.services.items() if name != "main"}

    def start_order(self) -> list[str]:
        """Sidecars in dependency order (a cycle is refused at load). Iterative: a chain
        as long as the file allows costs no recursion."""
        order: list[str] = []
        done: set[str] = set()
        for first in self.services:
            if first in done:
                continue
            trail: list[str] = [first]  # the path being walked, each with its next dependency
            deps = [iter(self.services[first].depends_on)]
            while trail:
                dep = next(deps[-1], None)
                if dep is None:
                    name = trail.pop()
                    deps.pop()
                    done.add(name)
                    if name != "main":
                        order.append(name)
                elif dep in trail:
                    raise ValueError(f"depends_on: a cycle through {' -> '.join(trail + [dep])}")
                elif dep not in done:
                    trail.append(dep)
                    deps.append(iter(self.services[dep].depends_on))
        return order


def allow_host_env(names: Iterable[str]) -> None:
    """The host variables datasets may read in this process (`--task-env`), set before
    tasks load; nothing by default."""
    global _allowed_host_env
    _allowed_host_env = frozenset(names)


def allowed_host_env() -> frozenset[str]:
    return _allowed_host_env


class HostEnv:
    """Host variables as a dataset may read them: only allowed names; every value read is
    kept (to be scrubbed) and every name refused is noted."""

    def __init__(self, allowed: Iterable[str] | None = None, where: str = ""):
        self.allowed = frozenset(allowed) if allowed is not None else _allowed_host_env
        self.where = where
        self.values: dict[str, str] = {}
        self.notes: list[str] = []

    def get(self, name: str, field: str) -> str | None:
        """The host's value for an allowed name (None when unset), None otherwise (noted)."""
        if name not in self.allowed:
            note = (f"{self.where}{field}: ${{{name}}} is not a host variable this run allows "
                    "(orchestra run --task-env NAME): read as its default, else empty")
            if note not in self.notes:
                self.notes.append(note)
            return None
        value = os.environ.get(name)
        if too_short(value):  # it would land unscrubbed in the trial's files
            raise InputError(f"{self.where}field '{field}': ${{{name}}} (--task-env): {refusal(value or '')}")
        if value:
            self.values[name] = value
        return value


def find(environment_dir: Path) -> Path | None:
    return next((environment_dir / n for n in FILENAMES if (environment_dir / n).is_file()), None)


def load_compose(path: Path, main_image: str = "") -> Compose:
    """Parse and check a task's compose file; InputError naming the file and field."""
    try:
        raw = load_yaml(read_capped(path, MAX_YAML_BYTES), path)  # no aliases, depth capped
    except OSError as exc:
        raise InputError(f"{path}: not readable: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("services"), dict):
        raise InputError(f"{path}: a compose file needs a `services` mapping")
    if len(raw["services"]) > MAX_SERVICES:
        raise InputError(f"{path}: field 'services': {len(raw['services'])} services; the limit is "
                         f"{MAX_SERVICES}")
    problems = [f"{path}: orchestra cannot honour `{key}` in a compose file" for key in raw
                if key not in ("services", "volumes", "networks", "name", "version")]
    for name, body in raw["services"].items():
        allowed = MAIN_KEYS if name == "main" else SERVICE_KEYS
        problems += [f"{path}: orchestra cannot honour `services.{name}.{key}`"
                     for key in (body or {}) if key not in allowed]
    for name, body in raw["services"].items():  # before interpolation: say what it was
        for volume in (body or {}).get("volumes") or []:
            source = str(volume).partition(":")[0]
            if source.startswith((".", "/", "~", "$")):
                problems.append(f"{path}: orchestra cannot honour `services.{name}.volumes` with a "
                                f"host path ({source}): only named volumes")
    networks = raw.get("networks") or {}  # every service is on the trial's one IPv4 network
    problems += [f"{path}: orchestra cannot honour `networks.{name}.{key}`: a trial's network is IPv4 "
                 "only (its firewall is)" for name, options in (networks.items() if isinstance(networks, dict) else [])
                 if isinstance(options, dict) for key in options if key == "enable_ipv6"]
    for name, body in raw["services"].items():
        attached = (body or {}).get("networks")
        problems += [f"{path}: orchestra cannot honour `services.{name}.networks.{net}.{key}`: a trial's "
                     "network is IPv4 only" for net, options in (attached.items() if isinstance(attached, dict) else [])
                     if isinstance(options, dict) for key in options if key == "ipv6_address"]
    volumes = raw.get("volumes") or {}
    problems += [f"{path}: orchestra cannot honour options of `volumes.{name}` (named volumes only)"
                 for name, options in volumes.items() if options]
    problems += [f"{path}: field 'volumes.{name}': a volume name is letters, digits, '_', '.' "
                 "and '-', starting with a letter or digit" for name in volumes
                 if not _VOLUME_NAME.fullmatch(str(name))]
    if problems:
        raise InputError(problems)
    context = {"CONTEXT_DIR": str(path.parent), "MAIN_IMAGE_NAME": main_image}
    host = HostEnv(where=f"{path.parent.name}/{path.name}: ")
    host.notes += _network_notes(raw, host.where)
    services = {name: _interpolate(body or {}, context, host, f"services.{name}")
                for name, body in raw["services"].items()}
    try:
        compose = Compose.model_validate({"services": services, "volumes": list(volumes)})
    except ValidationError as exc:
        raise InputError(validation_problems(path, exc)) from exc
    for name, service in compose.services.items():
        for key in [k for k in service.environment if is_wiring(k)]:
            del service.environment[key]
            host.notes.append(f"{host.where}services.{name}.environment.{key}: orchestra's wiring "
                              "variable, set by orchestra only: the dataset's value was dropped")
    compose.notes, compose.host_values = host.notes, host.values
    problems = []
    task_dir = path.parent.parent.resolve()
    for name, service in compose.sidecars.items():
        if not (service.image or service.build):
            problems.append(f"{path}: field 'services.{name}': needs `image` or `build`")
        outside = service.build and _outside(task_dir, path.parent, service.build)
        if outside:
            problems.append(f"{path}: field 'services.{name}.build.{outside[0]}': {outside[1]!r} "
                            "leaves the task folder (a build context stays inside the task)")
            continue
        if service.build and not (path.parent / service.build.context / service.build.dockerfile).is_file():
            problems.append(f"{path}: field 'services.{name}.build': no {service.build.dockerfile} "
                            f"in {service.build.context}")
    for name, service in compose.services.items():
        problems += [f"{path}: field 'services.{name}.depends_on': no service {dep!r}"
                     for dep in service.depends_on if dep not in compose.services]
        problems += [f"{path}: field 'services.{name}.volumes': volume {v.split(':')[0]!r} is not "
                     "declared under the top-level `volumes`" for v in service.volumes
                     if v.split(":")[0] not in compose.volumes]
        if name != "main" and any(d == "main" for d in service.depends_on):
            problems.append(f"{path}: field 'services.{name}.depends_on': a sidecar cannot wait for `main`")
    if problems:
        raise InputError(problems)
    try:
        compose.start_order()
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from exc
    return compose


def _network_notes(raw: dict[str, object], where: str) -> list[str]:
    """A note per network option orchestra does not apply (IPv6 is refused before): every
    service is on the trial's one network, so a driver, ipam, aliases or a fixed address
    are said in the trial's notes, never dropped without a word."""
    said = " not applied: orchestra puts every service on the trial's one network"
    top = raw.get("networks")
    notes = [f"{where}networks.{name}.{key}:{said}" for name, options in (top.items() if isinstance(top, dict) else [])
             if isinstance(options, dict) for key in options if key != "enable_ipv6"]
    services = raw.get("services")
    for name, body in (services.items() if isinstance(services, dict) else []):
        attached = body.get("networks") if isinstance(body, dict) else None
        notes += [f"{where}services.{name}.networks.{net}.{key}:{said}"
                  for net, options in (attached.items() if isinstance(attached, dict) else [])
                  if isinstance(options, dict) for key in options if key != "ipv6_address"]
    return notes


def _outside(task_dir: Path, environment: Path, build: Build) -> tuple[str, str] | None:
    """(field, value) of a build context or Dockerfile that is absolute or resolves outside
    the task folder (`../..` up to /), else None. The folder's links were checked at load."""
    context = environment / build.context
    for field, value, where in (("context", build.context, context),
                                ("dockerfile", build.dockerfile, context / build.dockerfile)):
        resolved = where.resolve()
        if value.startswith("/") or os.path.commonpath([task_dir, resolved]) != str(task_dir):
            return field, value
    return None


def _interpolate(value: object, context: dict[str, str], host: HostEnv, field: str) -> object:
    if isinstance(value, str):
        def sub(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name = match.group(1) or match.group(3)
            found = context[name] if name in context else host.get(name, field)
            return found if found not in (None, "") else (match.group(2) or "")
        return _VAR.sub(sub, value)
    if isinstance(value, list):
        return [_interpolate(v, context, host, f"{field}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _interpolate(v, context, host, f"{field}.{k}") for k, v in value.items()}
    return value


def _ns(duration: str) -> int:
    if len(duration) > 64 or not _DURATION.match(duration.strip()):
        raise ValueError(f"{duration[:64]!r} is not a duration like 5s or 1m30s")
    units = {"h": 3600e9, "m": 60e9, "s": 1e9, "ms": 1e6, "us": 1e3}
    return int(sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us)", duration)))
