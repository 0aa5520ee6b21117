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

if command -v docker >/dev/null 2>&1 && docker_answers; then
  exit 0
fi

if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
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

# gVisor, on an engine this script starts itself (an engine someone else runs keeps its
# configuration: `orchestra tasks check` prints the lines to add). Debian's runsc works
# here with the ptrace platform (KVM hangs); with Docker's networking it needs
# --network=host (gVisor then uses the namespace Docker made for the container; its own
# netstack refuses "to run with network enabled in root network namespace").
if ! pgrep -x dockerd >/dev/null 2>&1 && [ ! -e /etc/docker/daemon.json ]; then
  if command -v runsc >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null 2>&1; then
    mkdir -p /etc/docker
    cat > /etc/docker/daemon.json <<'JSON'
{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=host"]}}}
JSON
    echo "orchestra: registered gVisor (runsc, ptrace platform) with the engine it starts" >&2
  else
    echo "orchestra: runsc could not be installed; the gVisor tests will be skipped" >&2
  fi
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
  echo "orchestra: starting dockerd in the background (log: /var/log/orchestra-dockerd.log)" >&2
  nohup dockerd >/var/log/orchestra-dockerd.log 2>&1 &
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
