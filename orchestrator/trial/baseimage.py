"""Orchestra's base images, orchestra/base:<release>: Debian minbase with python3, pip, venv
and ca-certificates, debootstrapped on this host and `docker import`ed (no registry needed),
made to behave like the official python images. They stand in for `FROM python:...` and
Debian bases the engine cannot pull (tasks/standins.py chooses which)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from orchestrator.log import get_logger
from orchestrator.runtime.base import LABEL_IMAGE_KIND, BuildFailed, Runtime
from orchestrator.tasks.standins import RELEASES, base_image
from orchestrator.trial.images import image_lock

log = get_logger()
BOOTSTRAP_RELEASES = ("bookworm", "trixie")  # `orchestra images bootstrap`; bullseye on demand
BASE_VERSION = "3"  # bump when the base's recipe changes: an older base is rebuilt
LABEL_BASE_VERSION = "orchestra.base.version"
BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates")


def bootstrap_base(runtime: Runtime, release: str = "bookworm", force: bool = False) -> str:
    """orchestra/base:<release>: debootstrap a minbase Debian with python3, pip, venv and
    ca-certificates into a folder, make it behave like the official python images, and
    `docker import` it. Present and of this recipe's version: nothing to do."""
    image = base_image(release)

    def present() -> bool:
        if force or _base_version(runtime, image) != BASE_VERSION:
            return False
        log.info("base.present", image=image)
        return True

    if present():  # every trial asks: no lock taken
        return image
    with image_lock(image):
        if not present():  # another builder may have made it meanwhile
            _debootstrap_import(runtime, release, image)
    return image


def _base_version(runtime: Runtime, image: str) -> str | None:
    try:
        labels = runtime.image_facts(image).labels
    except Exception:
        return None
    return labels.get(LABEL_BASE_VERSION, "1") if labels.get(LABEL_IMAGE_KIND) == "base" else None


# What the official python images give that Debian's minbase + python3-pip does not: the
# interpreter and pip under /usr/local/bin, and pip installs without --break-system-packages.
_LIKE_OFFICIAL = """set -e
rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
for name in python3 python pip3 pip; do
  target=/usr/bin/python3; case $name in pip*) target=/usr/bin/pip3;; esac
  [ -e /usr/local/bin/$name ] || ln -s $target /usr/local/bin/$name
done
[ -e /usr/bin/python ] || ln -s python3 /usr/bin/python
# OpenSSL's default CA file: bookworm's openssl package links it, bullseye's does not (the
# conformance probe's ssl.get_default_verify_paths() found it missing there)
[ -e /usr/lib/ssl/cert.pem ] || ln -s /etc/ssl/certs/ca-certificates.crt /usr/lib/ssl/cert.pem
apt-get clean; rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
"""


def _debootstrap_import(runtime: Runtime, release: str, image: str) -> None:
    if shutil.which("debootstrap") is None:
        raise BuildFailed("debootstrap is not installed (apt-get install -y debootstrap)")
    if release not in RELEASES:
        raise BuildFailed(f"no offline base for Debian {release!r} (one of {', '.join(RELEASES)})")
    workdir = Path(tempfile.mkdtemp(prefix=f"orchestra-base-{release}-", dir="/var/tmp"))
    rootfs, tarball = workdir / "rootfs", workdir / "rootfs.tar"
    try:
        log.info("base.debootstrap", release=release, folder=str(rootfs))
        started = time.monotonic()
        subprocess.run(["debootstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
                        release, str(rootfs)], check=True, capture_output=True, timeout=1200)
        subprocess.run(["chroot", str(rootfs), "/bin/sh", "-c", _LIKE_OFFICIAL], check=True,
                       capture_output=True, timeout=120)
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True, timeout=600)
        labels = {LABEL_IMAGE_KIND: "base", LABEL_BASE_VERSION: BASE_VERSION,
                  "orchestra.base.release": release, "orchestra.base.python": RELEASES[release]}
        changes = [  # one LABEL per key: Podman reads `LABEL a=1 b=2` as a's value "1 b=2"
            *(f"LABEL {key}={value}" for key, value in labels.items()),
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "ENV LANG=C.UTF-8",
            'CMD ["bash"]',
        ]
        repository, tag = image.split(":")
        runtime.import_image(str(tarball), repository, tag, changes)
        log.info("base.imported", image=image, python=RELEASES[release],
                 seconds=round(time.monotonic() - started, 1))
    except subprocess.CalledProcessError as exc:
        raise BuildFailed(f"building {image} failed ({exc.cmd[0]}): "
                          f"{(exc.stderr or b'').decode(errors='replace')[-2000:]}") from exc
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
