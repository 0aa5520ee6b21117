"""Orchestra's base images, orchestra/base:<release>: Debian minbase with python3, pip, venv
and ca-certificates, debootstrapped on this host and `docker import`ed (no registry needed),
reshaped like the official python images (the interpreter under /usr/local, no Debian
python package visible to it). They stand in for `FROM python:...` and
Debian bases the engine cannot pull (tasks/standins.py chooses which)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from orchestrator.log import get_logger
from orchestrator.runtime import LABEL_IMAGE_KIND, BuildFailed, Runtime
from orchestrator.tasks import RELEASES, base_image
from orchestrator.trial.bases import facts_if_present
from orchestrator.trial.images import image_lock

log = get_logger()
BOOTSTRAP_RELEASES = ("bookworm", "trixie")  # `orchestra images bootstrap`; bullseye on demand
BASE_VERSION = "4"  # bump when the base's recipe changes: an older base is rebuilt
LABEL_BASE_VERSION = "orchestra.base.version"
BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "libpython3-dev", "ca-certificates")


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
    """The base recipe's version `image` was built by; None when the engine has none (an
    engine that fails raises: see images.facts_if_present)."""
    facts = facts_if_present(runtime, image)
    if facts is None:
        return None
    labels = facts.labels
    return labels.get(LABEL_BASE_VERSION, "1") if labels.get(LABEL_IMAGE_KIND) == "base" else None


# The official python images' shape (docker-library/python), made offline from Debian's own
# interpreter: its files copied under /usr/local (stdlib with lib-dynload, headers, the
# binary), sysconfig taught the upstream scheme (installs into
# /usr/local/lib/python3.X/site-packages), ensurepip allowed, pip and setuptools installed
# by pip from Debian's wheels (RECORD files: pip can upgrade them), then every Debian
# python package purged. A task's `apt-get install` may bring Debian's python back under
# /usr, where this interpreter never looks: its pip upgrades what it installed itself.
# Debian's site module is frozen into the binary (3.11 on) and looks for
# PREFIX/lib/python3.X/dist-packages: that name is a link to site-packages.
# Not the official shape, and said so: no `wheel` (Debian ships no wheel of it), no
# python3-config, and the interpreter is Debian's build (its patches, its version).
_LIKE_OFFICIAL = r"""set -e
V=$(ls /usr/bin/python3.* | grep -E 'python3\.[0-9]+$' | head -1 | sed 's,.*/python,,')
apt-mark manual $(apt-mark showauto) >/dev/null 2>&1 || true   # lib-dynload's libraries stay
mkdir -p /usr/local/bin /usr/local/lib /usr/local/include
rm -rf /usr/local/lib/python$V /usr/local/include/python$V
cp -a /usr/lib/python$V /usr/local/lib/python$V
rm -rf /usr/local/lib/python$V/dist-packages /usr/local/lib/python$V/EXTERNALLY-MANAGED
mkdir -p /usr/local/lib/python$V/site-packages
ln -s site-packages /usr/local/lib/python$V/dist-packages
cp -a /usr/include/python$V /usr/local/include/python$V
arch=$(ls -d /usr/include/*-linux-gnu/python$V 2>/dev/null | head -1)
if [ -n "$arch" ]; then cp "$arch/pyconfig.h" /usr/local/include/python$V/pyconfig.h; fi
cp /usr/bin/python$V /usr/local/bin/python$V
/usr/local/bin/python$V - "$V" <<'PY'
import glob, re, sys
v = sys.argv[1]
root = f"/usr/local/lib/python{v}"
def edit(path, change):
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(change(text))
# installs go to the prefix's own scheme, as upstream (Debian's posix_local adds /local)
edit(glob.glob(f"{root}/sysconfig.py") and f"{root}/sysconfig.py" or f"{root}/sysconfig/__init__.py", lambda t: t.replace("prefix_scheme = 'posix_local'", "prefix_scheme = 'posix_prefix'"))
# Debian refuses ensurepip for its system python; this one is not that
edit(f"{root}/ensurepip/__init__.py", lambda t: t.replace(
    "def _ensurepip_is_disabled_in_debian_for_system():\n",
    "def _ensurepip_is_disabled_in_debian_for_system():\n    return  # orchestra's stand-in\n", 1))
# the build's recorded paths: /usr -> /usr/local where they name this interpreter's files
for data in glob.glob(f"{root}/_sysconfigdata_*.py"):
    edit(data, lambda t: re.sub(r"'(prefix|exec_prefix)': '/usr'", r"'\1': '/usr/local'", t.replace(
        f"'/usr/include/python{v}", f"'/usr/local/include/python{v}").replace(
        f"'/usr/lib/python{v}", f"'/usr/local/lib/python{v}")))
PY
# OpenSSL's default CA file: bookworm's openssl package links it, bullseye's does not
[ -e /usr/lib/ssl/cert.pem ] || ln -s /etc/ssl/certs/ca-certificates.crt /usr/lib/ssl/cert.pem
find /usr/local/lib/python$V -name __pycache__ -prune -exec rm -rf {} +
/usr/local/bin/python$V -m ensurepip --default-pip >/dev/null 2>&1
cd /usr/local/bin
ln -sf python$V python3; ln -sf python$V python
[ -e pip3 ] || ln -s pip$V pip3
[ -e pip ] || ln -s pip$V pip
cd /
DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $(dpkg-query -W -f '${Package}\n' | grep -E '^(python3|libpython3)' | grep -v -- '-whl$') >/dev/null 2>&1
rm -rf /usr/lib/python3 /usr/lib/python$V /usr/include/python$V /usr/bin/python3*
/usr/local/bin/python3 -c "import ssl, sqlite3, ctypes, decimal, lzma, bz2, zlib, venv, pip, sysconfig
assert sysconfig.get_paths()['purelib'] == '/usr/local/lib/python$V/site-packages', sysconfig.get_paths()"
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
