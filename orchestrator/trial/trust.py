"""A CA bundle trusted by every container of a trial (DESIGN 5): behind a TLS-intercepting
proxy, a test.sh that pip-installs its test dependencies at grading time, a sidecar that
fetches, or a worker agent's CLI all need the proxy's CA, not only the image build.

With `--ca-bundle FILE` each container (agent, verifier, workers, sidecars) gets the file
read-only at CA_PATH and the variables pip, requests, OpenSSL/Python, curl, node, git and
uv read; the agent's container also appends it to its system store
(/etc/ssl/certs/ca-certificates.crt, when the image has one) before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.runtime import ContainerSpec

CA_PATH = "/etc/orchestra/ca-bundle.pem"
CA_VARIABLES = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")
SYSTEM_STORE = "/etc/ssl/certs/ca-certificates.crt"
# Appended once (a marker line keeps a second run from appending again); no shell or no
# store: nothing to do, and the variables still hold.
APPEND = (f"[ -f {SYSTEM_STORE} ] && [ -w {SYSTEM_STORE} ] || exit 0; "
          f"grep -q 'orchestra-ca-bundle' {SYSTEM_STORE} && exit 0; "
          f"{{ echo '# orchestra-ca-bundle'; cat {CA_PATH}; }} >> {SYSTEM_STORE}")


BUNDLE_IN_CONTEXT = "orchestra-ca-bundle.pem"  # where a build context carries the bundle


@dataclass(frozen=True)
class Trust:
    binds: dict[str, str] = field(default_factory=dict)  # host path -> container path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.binds)

    @property
    def pem(self) -> bytes | None:
        """The bundle's bytes, for a build (None: no bundle)."""
        return next((Path(host).read_bytes() for host, target in self.binds.items()
                     if target == CA_PATH), None)

    def container(self, spec: ContainerSpec) -> ContainerSpec:
        """`spec` with the bundle: every container of a trial is made through this (the
        container's own variables win over the bundle's only where they name another file)."""
        return replace(spec, env={**self.env, **spec.env},
                       read_only_binds={**spec.read_only_binds, **self.binds})


def trust_for(bundle: Path | None) -> Trust:
    if bundle is None:
        return Trust()
    return Trust(binds={str(bundle.resolve()): CA_PATH}, env={v: CA_PATH for v in CA_VARIABLES})


def trusted_stage() -> list[str]:
    """What every build stage gets after its FROM when a bundle is given: the file at
    CA_PATH and the variables pip, requests, OpenSSL, curl, node and git read. Every image
    build (task, tests/Dockerfile, compose builds) goes through images.build_context, which
    adds these: a new kind of build cannot miss them."""
    return [f"COPY {BUNDLE_IN_CONTEXT} {CA_PATH}",
            "ENV " + " ".join(f"{v}={CA_PATH}" for v in CA_VARIABLES)]
