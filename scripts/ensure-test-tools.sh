#!/usr/bin/env bash
# The real parts the tests use beside the engine, from Debian's packages, installed in one
# apt call when missing and this machine allows it (root, apt-get): headless Chromium (the
# viewer and report tests), docker-registry with apache2-utils' htpasswd (a private
# registry with authentication), podman with catatonit (Podman's Docker-compatible socket as
# the engine), openssh-server (an engine reached over ssh://). A test whose part is missing
# is skipped with the reason. And Harbor's ATIF models (below).
set -u

# Harbor's own ATIF models, the judge of every trial's agent/trajectory.atif.json
# (tests/integration/test_atif_harbor.py runs them in a subprocess): the `harbor` package from PyPI,
# pinned, in a throwaway venv under the cache; orchestra never imports it. Harbor declares
# Python >= 3.12 for its whole framework, and its models/trajectories are plain pydantic, so
# on a 3.11 host it goes in with --ignore-requires-python and without the framework's
# dependencies (pydantic alone). A failed install stops here, as a missing apt part does.
HARBOR_VERSION=0.26.0
harbor_venv="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}/harbor-venv"
if [ "$(cat "$harbor_venv/orchestra-harbor-version" 2>/dev/null)" != "$HARBOR_VERSION" ]; then
  echo "orchestra: installing harbor $HARBOR_VERSION (its ATIF models, for the tests) in $harbor_venv..." >&2
  rm -rf "$harbor_venv"
  { python3 -m venv "$harbor_venv" \
    && "$harbor_venv/bin/pip" install -q --no-deps --ignore-requires-python "harbor==$HARBOR_VERSION" \
    && "$harbor_venv/bin/pip" install -q "pydantic>=2.11.7,<3" \
    && "$harbor_venv/bin/python" -c "from harbor.models.trajectories import Trajectory"; } \
    >/tmp/orchestra-harbor-venv.log 2>&1 \
    || { echo "orchestra: could not install harbor $HARBOR_VERSION for the ATIF test (pip's output: /tmp/orchestra-harbor-venv.log)" >&2; tail -5 /tmp/orchestra-harbor-venv.log >&2; rm -rf "$harbor_venv"; exit 1; }
  echo "$HARBOR_VERSION" >"$harbor_venv/orchestra-harbor-version"
fi

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || missing+=(apache2-utils)
command -v podman >/dev/null 2>&1 || missing+=(podman)
[ -e /usr/libexec/podman/catatonit ] || missing+=(catatonit)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "orchestra: installing ${missing[*]} (for the tests)..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${missing[@]}" >/tmp/orchestra-test-tools.log 2>&1 \
    || { apt-get update -qq >>/tmp/orchestra-test-tools.log 2>&1 && apt-get install -y -qq "${missing[@]}" >>/tmp/orchestra-test-tools.log 2>&1; } \
    || { echo "orchestra: could not install ${missing[*]} for the tests (apt-get's output: /tmp/orchestra-test-tools.log)" >&2; tail -5 /tmp/orchestra-test-tools.log >&2; exit 1; }
  exit 0
fi
echo "orchestra: the tests need ${missing[*]}, and this machine cannot install them (not root, or no apt-get): install them, or see README's 'Test parts' for running with a part waived" >&2
exit 1
