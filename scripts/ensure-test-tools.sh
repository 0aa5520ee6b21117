#!/usr/bin/env bash
# The real parts the tests use beside the engine, from Debian's packages, installed in one
# apt call when missing and this machine allows it (root, apt-get): headless Chromium (the
# viewer and report tests), docker-registry with apache2-utils' htpasswd (a private
# registry with authentication), podman with catatonit (Podman's Docker-compatible socket as
# the engine), openssh-server (an engine reached over ssh://). A test whose part is missing
# is skipped with the reason.
set -u
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
