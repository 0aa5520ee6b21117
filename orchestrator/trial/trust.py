"""A CA bundle trusted by every container of a trial (DESIGN 5): behind a TLS-intercepting
proxy, a test.sh that pip-installs its test dependencies at grading time, a sidecar that
fetches, or a worker agent's CLI all need the proxy's CA, not only the image build.

With `--ca-bundle FILE` each container (agent, verifier, workers, sidecars) gets the file
read-only at CA_PATH and the variables pip, requests, OpenSSL/Python, curl, node, git and
uv read; the agent's container also appends it to its system store
(/etc/ssl/certs/ca-certificates.crt, when the image has one) before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

CA_PATH = "/etc/orchestra/ca-bundle.pem"
CA_VARIABLES = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")
SYSTEM_STORE = "/etc/ssl/certs/ca-certificates.crt"
# Appended once (a marker line keeps a second run from appending again); no shell or no
# store: nothing to do, and the variables still hold.
APPEND = (f"[ -f {SYSTEM_STORE} ] && [ -w {SYSTEM_STORE} ] || exit 0; "
          f"grep -q 'orchestra-ca-bundle' {SYSTEM_STORE} && exit 0; "
          f"{{ echo '# orchestra-ca-bundle'; cat {CA_PATH}; }} >> {SYSTEM_STORE}")


@dataclass(frozen=True)
class Trust:
    binds: dict[str, str] = field(default_factory=dict)  # host path -> container path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.binds)


def trust_for(bundle: Path | None) -> Trust:
    if bundle is None:
        return Trust()
    return Trust(binds={str(bundle.resolve()): CA_PATH}, env={v: CA_PATH for v in CA_VARIABLES})
