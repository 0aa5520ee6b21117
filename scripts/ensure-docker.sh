#!/usr/bin/env bash
# Make sure a Docker engine answers. If none does and this machine allows it
# (root on Debian/Ubuntu), install docker.io, start dockerd in the background
# and wait for `docker info`. Otherwise say what to install and exit 3.
set -euo pipefail

docker_answers() { timeout 10 docker info >/dev/null 2>&1; }

# bash-static and busybox-static: the verifier's read-only interpreter in shared and
# snapshot modes (orchestrator/trial/verifier_tools.py); without them the image's own is used.
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 \
   && { [ ! -x /bin/bash-static ] || ! dpkg -s busybox-static >/dev/null 2>&1; }; then
  echo "orchestra: installing bash-static and busybox-static (the verifier's own interpreter)..." >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -qq bash-static busybox-static || { apt-get update -qq && apt-get install -y -qq bash-static busybox-static; }; } >/dev/null 2>&1 \
    || echo "orchestra: could not install bash-static/busybox-static; shared-mode grading uses the image's own shell" >&2
fi

if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  command -v docker >/dev/null 2>&1 && docker_answers && exit 0
  echo "orchestra: no Docker engine answers and this machine cannot install one by itself." >&2
  echo "  Install and start Docker (e.g. 'sudo apt-get install -y docker.io && sudo dockerd &'), then retry." >&2
  exit 3
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  echo "orchestra: installing docker.io, debootstrap, bash-static and busybox-static from Debian packages..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq docker.io debootstrap bash-static busybox-static >/dev/null
fi

# The engine's settings the tests rely on, merged into /etc/docker/daemon.json (keys
# already there are kept) and reloaded by SIGHUP when dockerd already runs: both keys are
# among dockerd's reloadable options, so an engine someone else started gets them too.
# - gVisor: Debian's runsc works here with the ptrace platform (KVM hangs); with Docker's
#   networking it needs --network=host (gVisor then uses the namespace Docker made for the
#   container; its own netstack refuses "to run with network enabled in root network namespace").
# - a registry mirror on 127.0.0.1:5678 (tests/integration/test_bases_pull.py serves Debian's
#   docker-registry there while it runs): a Docker Hub name is pulled from it as from the Hub.
#   Nothing listens there otherwise, so a pull falls through to the real registry.
# ORCHESTRA_ENGINE_CONFIG=keep leaves daemon.json alone (the tests that need these then say so).
if [ "${ORCHESTRA_ENGINE_CONFIG:-merge}" != "keep" ]; then
  if ! command -v runsc >/dev/null 2>&1; then
    echo "orchestra: installing runsc (gVisor) from Debian packages..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null 2>&1; } \
      || { echo "orchestra: runsc could not be installed (apt-get install runsc failed)" >&2; exit 3; }
  fi
  mkdir -p /etc/docker
  changed=$(python3 - "$(command -v runsc)" <<'PY'
import json, os, sys
path = "/etc/docker/daemon.json"
config = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
before = json.dumps(config, sort_keys=True)
config.setdefault("runtimes", {})["runsc"] = {
    "path": sys.argv[1], "runtimeArgs": ["--platform=ptrace", "--network=host"]}
mirrors = config.setdefault("registry-mirrors", [])
if "http://127.0.0.1:5678" not in mirrors:
    mirrors.append("http://127.0.0.1:5678")
if json.dumps(config, sort_keys=True) != before:
    with open(path + ".tmp", "w") as out:
        json.dump(config, out, indent=1)
    os.replace(path + ".tmp", path)
    print("yes")
PY
)
  if [ "$changed" = "yes" ] && pgrep -x dockerd >/dev/null 2>&1; then
    kill -HUP "$(pgrep -x dockerd | head -1)"
    for _ in $(seq 1 50); do
      timeout 5 docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q runsc && break
      sleep 0.2
    done
    echo "orchestra: registered gVisor (runsc) and the test registry mirror with the running engine (SIGHUP)" >&2
  elif [ "$changed" = "yes" ]; then
    echo "orchestra: registered gVisor (runsc) and the test registry mirror in /etc/docker/daemon.json" >&2
  fi
fi

if ! pgrep -x dockerd >/dev/null 2>&1 && ! docker_answers; then
  echo "orchestra: starting dockerd in the background (log: /var/log/orchestra-dockerd.log)" >&2
  # dockerd outlives this script: it gets none of the descriptors make (or CI's wrapper) gave
  # us, beyond stdin/out/err (an inherited lock file, `flock F make test`, would stay held
  # by dockerd for as long as it runs).
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
    done
    exec nohup dockerd </dev/null >/var/log/orchestra-dockerd.log 2>&1
  ) &
fi

for _ in $(seq 1 60); do
  if docker_answers; then
    echo "orchestra: Docker engine is up: $(docker version --format '{{.Server.Version}}' 2>/dev/null)" >&2
    exit 0
  fi
  sleep 1
done
echo "orchestra: dockerd did not answer within 60 s; see /var/log/orchestra-dockerd.log" >&2
exit 3
