"""The engine itself, as a part of DockerRuntime (`EngineMixin`): its facts (CPUs, memory,
the OCI runtimes it can start containers under, Docker or Podman, its data root), the free
space under its data root, whether it answers at all (never raises), its loop disks, and
what it can enforce for containers on this host (disk quotas, host isolation), with why
not, and its optional parts (all of them).
"""

from __future__ import annotations

import os

from orchestrator.runtime import firewall
from orchestrator.runtime.base import Capabilities, EngineFacts, Part
from orchestrator.runtime.client import APIError
from orchestrator.runtime.disk import LoopDisks
from orchestrator.runtime.docker.shared import DockerState


class EngineMixin(DockerState):
    def engine_facts(self) -> EngineFacts:
        info = self.api.info()
        return EngineFacts(cpus=float(info.get("NCPU") or 1),
                           memory_mb=int((info.get("MemTotal") or 2**31) // 2**20),
                           oci_runtimes=sorted(info.get("Runtimes") or {}),
                           version=str(info.get("ServerVersion") or ""),
                           kind="podman" if self.podman else "docker",
                           data_root=str(info.get("DockerRootDir") or ""),
                           # Podman's compatible API may not say an ID: its socket names it
                           engine_id=str(info.get("ID") or f"{self.api.base_url}"))

    def data_root_space(self, facts: EngineFacts | None = None) -> tuple[int, int] | None:
        root = (facts or self.engine_facts()).data_root
        if not self.local_engine or not root:
            return None
        try:
            stat = os.statvfs(root)
        except OSError:
            return None
        return stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize

    def unanswered(self, timeout_sec: float = 5.0) -> str | None:
        try:
            return None if self.api.ping(timeout=timeout_sec) else "its ping was not OK"
        except APIError as exc:  # it answers, with an error: as good as gone for a trial
            return f"it answers {exc.status_code}: {str(exc.explanation or exc)[:200]}"
        except Exception as exc:  # refused, reset, timed out: gone
            return f"{exc.__class__.__name__}: {str(exc)[:200]}"

    def loop_disks(self) -> LoopDisks | None:
        return self._loop_disks

    def capabilities(self, facts: EngineFacts | None = None) -> Capabilities:
        why = {}
        if not self.local_engine:
            why["disk_quota"] = why["host_isolation"] = (
                f"the engine is on another host ({self.api.base_url}): this host's loop disks "
                "and firewall do not reach its containers")
        else:
            if self._loop_disks is None:
                why["disk_quota"] = "loop disks need root, mkfs.ext4 and /dev/loop-control"
            if not firewall.available():
                why["host_isolation"] = "host isolation needs root and iptables"
        return Capabilities(
            disk_quota="watchdog" if "disk_quota" in why else "loop-volume",
            host_isolation="none" if "host_isolation" in why else "iptables",
            oci_runtimes=(facts or self.engine_facts()).oci_runtimes, local_engine=self.local_engine,
            why=why, parts=frozenset(Part))  # every optional part (docker-py reaches them all)
