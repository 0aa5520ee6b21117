"""Which registries may be sent the user's credentials (issue 56): the ones the user names,
never one a dataset picks in a FROM. The engine client (runtime/client.py) asks here before
a build or a pull sends any.

Named by `ORCHESTRA_REGISTRY_AUTH` (comma-separated hosts), by `orchestra run
--registry-auth HOST` (RunRequest.registry_auth) and by the job's own `--registry` (where
its images go: `trust_registry`).
"""

from __future__ import annotations

import os

REGISTRY_AUTH_ENV = "ORCHESTRA_REGISTRY_AUTH"
_NAMED: set[str] = set()  # registries named for this process's jobs (trust_registry)


def registry_host(name: str) -> str:
    """A registry as the config and references name it (`https://index.docker.io/v1/`,
    `private.example:5000/prefix`, `docker.io`), as one host[:port], Docker Hub's as docker.io."""
    host = name.split("://", 1)[-1].split("/", 1)[0].lower()
    return "docker.io" if host in ("index.docker.io", "registry-1.docker.io", "docker.io") else host


def trust_registry(name: str) -> None:
    """The user named this registry: its credentials may be sent."""
    _NAMED.add(registry_host(name))


def trusted_registries() -> frozenset[str]:
    """The registries whose credentials orchestra may send."""
    named = (registry_host(h.strip()) for h in os.environ.get(REGISTRY_AUTH_ENV, "").split(",") if h.strip())
    return frozenset(named) | frozenset(_NAMED)
