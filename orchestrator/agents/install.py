"""Installing an agent CLI once, on the host, into orchestra's cache (no network in builds).

The ordinary package clients do the download on the host (pip for PyPI, `npm pack` for
npm), honouring a CA bundle (`--ca-bundle`: PIP_CERT and npm's cafile), into
`$ORCHESTRA_CACHE/agents/NAME-VERSION/` (default `~/.cache/orchestra`). The folder is
built beside its final place and renamed into it, so a half-done install is never used;
a lock makes concurrent jobs install once. Trials mount it read-only (`Agent.binds`): no
layer per task image, nothing installed inside a trial's timed phases, and the agent
cannot change its own install.

- pypi: `pip install --target lib PACKAGE==VERSION` with the host's Python, which must be
  the minor version the task images run (3.11, Debian bookworm's), then compiled to .pyc
  (the mount is read-only, so the agent could not cache them itself). A recipe naming
  another `python` (OpenHands: 3.13) is installed for that version from wheels only
  (`pip download --python-version --platform manylinux...`, then `pip install --no-deps`
  of those wheels), its sdist-only dependencies (`sdists`, pure Python) first built into
  wheels by the host's pip, with any `extra` requirements it needs there; not compiled (the agent's run script points its .pyc cache at
  a writable folder).
- npm: `npm pack PACKAGE@VERSION`, unpacked; the recipe names the binary inside.
- deb: `apt-get download` of the packages (`package` is a space-separated list, for the
  host's Debian/Ubuntu release), each unpacked with `dpkg-deb -x` (a program and its
  libraries, mounted beside the agent: OpenHands' tmux).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import InfraError
from orchestrator.log import get_logger
from orchestrator.paths import cache_root

log = get_logger()
PYTHON = (3, 11)  # what the offline base (Debian bookworm) and most task images run


@dataclass(frozen=True)
class Recipe:
    name: str  # the agent's name: `orchestra run --agent NAME`
    kind: str  # pypi | npm | deb
    package: str
    version: str
    binary: str = ""  # npm: the executable inside the package
    python: str = ""  # pypi: the task images' python3 ("3.13") when not the host's minor version
    sdists: tuple[str, ...] = ()  # pypi with python: pure-Python sdist-only requirements
    extra: tuple[str, ...] = ()  # pypi with python: installed with it (backports it needs there)


def warm_binary(recipe: Recipe) -> None:
    """An npm recipe's executable read once on the host, so its pages sit in the host's page
    cache, charged to the host. A file's page is charged to the memory cgroup that first
    reads it in: a binary evicted since the last run was charged to the task's container
    (opencode's ~90 MB of mapped code on top of its ~400 MB, in a task of memory_mb=512),
    which then reclaimed the binary's own code pages and faulted them back in, over and over
    (a livelock in page reclaim, no OOM kill) until the deadline: "timeout with reward 1"
    (docs/upstream/opencode-hang.md). ~12 ms when cached, ~0.3 s when not."""
    if recipe.kind != "npm" or not recipe.binary:
        return
    buffer = memoryview(bytearray(1 << 20))
    with open(install_dir(recipe) / "pkg/package" / recipe.binary, "rb", buffering=0) as binary:
        while binary.readinto(buffer):
            pass


def install_dir(recipe: Recipe) -> Path:
    return cache_root() / "agents" / f"{recipe.name}-{recipe.version}"


def installed(recipe: Recipe) -> bool:
    return (install_dir(recipe) / "installed.json").is_file()


def ensure_installed(recipe: Recipe, ca_bundle: Path | None = None) -> Path:
    """The recipe's install folder, installed now if it is not yet (minutes, once)."""
    final = install_dir(recipe)
    if installed(recipe):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(final.parent / f".{final.name}.lock"):
        if installed(recipe):
            return final
        work = final.parent / f".{final.name}.{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        started = time.monotonic()
        # a warning so a run shows it: the first use waits minutes on pip or npm, once
        log.warning("agent.installing", agent=recipe.name, package=recipe.package,
                    version=recipe.version, into=str(final),
                    message=f"installing {recipe.name} {recipe.version} once (pip/npm on this "
                            "host, a few minutes); later runs reuse it")
        try:
            {"pypi": _pypi, "npm": _npm, "deb": _deb}[recipe.kind](recipe, work, _client_env(ca_bundle))
        except (subprocess.CalledProcessError, OSError, tarfile.TarError) as exc:
            shutil.rmtree(work, ignore_errors=True)
            out = getattr(exc, "stderr", b"") or b""
            raise InfraError(f"installing agent {recipe.name} ({recipe.kind} {recipe.package} "
                             f"{recipe.version}) failed: {exc}; {out.decode(errors='replace')[-800:]}") from exc
        (work / "installed.json").write_text(json.dumps({
            "name": recipe.name, "kind": recipe.kind, "package": recipe.package,
            "version": recipe.version, "seconds": round(time.monotonic() - started, 1)}))
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
        log.info("agent.installed", agent=recipe.name, seconds=round(time.monotonic() - started, 1))
    return final


def _client_env(ca_bundle: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if ca_bundle is not None:
        env.update(PIP_CERT=str(ca_bundle), npm_config_cafile=str(ca_bundle),
                   REQUESTS_CA_BUNDLE=str(ca_bundle))
    return env


def _download(url: str, target: Path, ca_bundle: str | None) -> None:
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else None
    with urllib.request.urlopen(url, timeout=600, context=context) as response, target.open("wb") as out:
        shutil.copyfileobj(response, out)


def _pypi(recipe: Recipe, work: Path, env: dict[str, str]) -> None:
    if recipe.python and recipe.python != f"{sys.version_info[0]}.{sys.version_info[1]}":
        _pypi_for(recipe, work, env)
        return
    if sys.version_info[:2] != PYTHON:
        raise OSError(f"the host's Python is {sys.version_info[0]}.{sys.version_info[1]}; agents "
                      f"from PyPI are installed for the task images' Python "
                      f"{PYTHON[0]}.{PYTHON[1]} and need the same on the host")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-warn-script-location", "--target", str(work / "lib"),
                    f"{recipe.package}=={recipe.version}"],
                   env=env, check=True, capture_output=True, timeout=1800)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(work / "lib")],
                   env=env, check=False, capture_output=True, timeout=1800)


# wheels for the task images' x86-64 glibc (Debian 11+, Ubuntu 20.04+ have glibc >= 2.31)
_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def _pypi_for(recipe: Recipe, work: Path, env: dict[str, str]) -> None:
    """The recipe installed for another Python (recipe.python) than the host's: pip resolves
    for that version and platform from wheels only, then installs those wheels as they are."""
    pip = [sys.executable, "-m", "pip"]
    quiet = ["--quiet", "--disable-pip-version-check"]
    built, wheels = work / "sdists", work / "wheels"
    for requirement in recipe.sdists:  # pure Python: the host's pip builds a py3-none-any wheel
        subprocess.run([*pip, "wheel", *quiet, "--no-deps", "-w", str(built), requirement],
                       env=env, check=True, capture_output=True, timeout=1800)
    target = ["--python-version", recipe.python, "--implementation", "cp", "--only-binary=:all:",
              *(f"--platform={p}" for p in _PLATFORMS)]
    subprocess.run([*pip, "download", *quiet, "-d", str(wheels), "--find-links", str(built), *target,
                    f"{recipe.package}=={recipe.version}", *recipe.extra],
                   env=env, check=True, capture_output=True, timeout=3600)
    subprocess.run([*pip, "install", *quiet, "--no-warn-script-location", "--no-deps", "--no-index",
                    "--ignore-requires-python", "--target", str(work / "lib"), *target,
                    *sorted(str(w) for w in wheels.glob("*.whl"))],
                   env=env, check=True, capture_output=True, timeout=1800)
    shutil.rmtree(built, ignore_errors=True)
    shutil.rmtree(wheels)


def _deb(recipe: Recipe, work: Path, env: dict[str, str]) -> None:
    """Debian packages for the host's release, unpacked (not installed) under work/root."""
    debs = work / "debs"
    debs.mkdir()
    subprocess.run(["apt-get", "download", *recipe.package.split()], cwd=debs, env=env,
                   check=True, capture_output=True, timeout=1800)
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "root")], env=env, check=True,
                       capture_output=True, timeout=600)
    shutil.rmtree(debs)
    if recipe.binary and not (work / "root" / recipe.binary).is_file():
        raise OSError(f"apt-get download {recipe.package}: no {recipe.binary} in the packages")


def _npm(recipe: Recipe, work: Path, env: dict[str, str]) -> None:
    if shutil.which("npm"):
        done = subprocess.run(["npm", "pack", "--silent", f"{recipe.package}@{recipe.version}"],
                              cwd=work, env=env, check=True, capture_output=True, timeout=1800)
        tarball = work / done.stdout.decode().strip().splitlines()[-1]
    else:  # no npm on this host: the registry's tarball, fetched directly (same CA bundle)
        tarball = work / "package.tgz"
        _download(f"https://registry.npmjs.org/{recipe.package}/-/"
                  f"{recipe.package.split('/')[-1]}-{recipe.version}.tgz", tarball,
                  env.get("npm_config_cafile"))
    with tarfile.open(tarball) as archive:
        archive.extractall(work / "pkg", filter="data")
    tarball.unlink()
    binary = work / "pkg" / "package" / recipe.binary
    if not binary.is_file():
        raise OSError(f"{recipe.package}@{recipe.version}: no {recipe.binary} in the package")
    binary.chmod(0o755)
