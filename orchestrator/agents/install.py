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
  wheels by the host's pip, with any `extra` requirements it needs there; then compiled to
  .pyc by its `interpreter` (a deb recipe's Python of that version, run on the host).
- npm: `npm pack PACKAGE@VERSION`, unpacked; the recipe names the binary inside.
- deb: Debian packages of the release named as the recipe's version (trixie), whatever
  the host's release: `apt-get update` and `apt-get download` against that release's
  sources in a private apt folder (the host's apt settings, proxies included, still apply;
  the host needs apt and Debian's archive keyring), each package unpacked with `dpkg-deb -x`
  (not installed). Programs it `wrap`s run through the packages' own loader and libraries
  (`ld-linux-x86-64.so.2 --library-path`), not the image's, so they run in any x86-64
  Linux image whatever its libc: each ELF is moved to usr/libexec/orchestra and a wrapper
  script takes its place under usr/bin, which holds only the wrappers. A wrapped Python
  gets its standard library compiled to .pyc.
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
    interpreter: Recipe | None = None  # pypi with python: a deb recipe wrapping that Python, compiles it
    wrap: tuple[tuple[str, str], ...] = ()  # deb: (ELF in the packages, wrapper name in usr/bin)
    build: str = ""  # how it is installed, when that changed what its folder holds (in the folder's name)


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
    return cache_root() / "agents" / f"{recipe.name}-{recipe.version}{'+' + recipe.build if recipe.build else ''}"


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
    # --no-compile: the host's pip would compile them for the host's Python (447 MB of unused .pyc)
    subprocess.run([*pip, "install", *quiet, "--no-warn-script-location", "--no-deps", "--no-index", "--no-compile",
                    "--ignore-requires-python", "--target", str(work / "lib"), *target,
                    *sorted(str(w) for w in wheels.glob("*.whl"))],
                   env=env, check=True, capture_output=True, timeout=1800)
    shutil.rmtree(built, ignore_errors=True)
    shutil.rmtree(wheels)
    if recipe.interpreter is not None:  # its .pyc, made once here (the mount is read-only)
        python = ensure_installed(recipe.interpreter, None) / "root/usr/bin" / recipe.interpreter.wrap[0][1]
        subprocess.run([str(python), "-m", "compileall", "-q", "-j", "0", str(work / "lib")],
                       env=env, check=False, capture_output=True, timeout=3600)


# the Debian archive's suites for a release: its own, its updates and its security fixes
_DEBIAN = "http://deb.debian.org"
_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def _deb(recipe: Recipe, work: Path, env: dict[str, str]) -> None:
    """The recipe's packages from its Debian release (recipe.version), unpacked (not
    installed) under work/root, with the programs it wraps run by their own loader."""
    apt, debs, root = work / "apt", work / "debs", work / "root"
    for folder in (apt / "lists/partial", apt / "cache/archives/partial", apt / "preferences.d", debs):
        folder.mkdir(parents=True)
    release = recipe.version
    (apt / "sources.list").write_text("".join(
        f"deb [signed-by={_KEYRING}] {_DEBIAN}/{archive} {suite} main\n" for archive, suite in (
            ("debian", release), ("debian", f"{release}-updates"), ("debian-security", f"{release}-security"))))
    options = [f"-oDir::Etc::SourceList={apt / 'sources.list'}", "-oDir::Etc::SourceParts=-",
               f"-oDir::Etc::PreferencesParts={apt / 'preferences.d'}", f"-oDir::State::Lists={apt / 'lists'}",
               f"-oDir::Cache={apt / 'cache'}", "-oDir::State::status=/dev/null",
               "-oAPT::Architecture=amd64", "-oAPT::Architectures=amd64", "-oAPT::Sandbox::User=root"]
    subprocess.run(["apt-get", *options, "-q", "update"], env=env, check=True, capture_output=True, timeout=1800)
    subprocess.run(["apt-get", *options, "-q", "download", *recipe.package.split()], cwd=debs, env=env,
                   check=True, capture_output=True, timeout=1800)
    versions = {}
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], env=env, check=True,
                       capture_output=True, timeout=600)
        versions[deb.name.split("_")[0]] = deb.name.split("_")[1].replace("%3a", ":")
    shutil.rmtree(debs)
    shutil.rmtree(apt)
    (work / "packages.json").write_text(json.dumps(versions, indent=1, sort_keys=True))
    for unused in ("usr/share/doc", "usr/share/man", "usr/share/lintian"):
        shutil.rmtree(root / unused, ignore_errors=True)
    _wrap(recipe, root, env)
    if recipe.binary and not (root / recipe.binary).is_file():
        raise OSError(f"{release}'s {recipe.package}: no {recipe.binary} in the packages")


# A wrapped Python's start (site runs it through orchestra.pth): the agent's packages come
# from ORCHESTRA_PYTHON_PATH, never PYTHONPATH, which every process the agent starts would
# inherit (its shell, and the task's own python3 there: a 3.13 package shadowing the
# image's); and PYTHONPATH is put back as the image had it (ORCHESTRA_IMAGE_PYTHONPATH, or
# unset), whatever the agent set for its children (OpenHands puts its lib in it)
_STARTUP = '''"""orchestra: run at this Python's start, through orchestra.pth."""
import os
import sys

_extra = os.environ.get("ORCHESTRA_PYTHON_PATH")
if _extra:
    sys.path.extend(p for p in _extra.split(os.pathsep) if p and p not in sys.path)
    if "ORCHESTRA_IMAGE_PYTHONPATH" in os.environ:
        os.environ["PYTHONPATH"] = os.environ["ORCHESTRA_IMAGE_PYTHONPATH"]
    else:
        os.environ.pop("PYTHONPATH", None)
'''


def _wrap(recipe: Recipe, root: Path, env: dict[str, str]) -> None:
    """Each wrapped ELF moved to usr/libexec/orchestra, a script in its place under usr/bin
    running it through the packages' own loader (--argv0: the script's path, so a Python
    finds its prefix from it and its sys.executable is the script); usr/bin keeps only these."""
    if not recipe.wrap:
        return
    libexec, bin_dir = root / "usr/libexec/orchestra", root / "usr/bin"
    libexec.mkdir(parents=True)
    for program, _ in recipe.wrap:
        (root / program).rename(libexec / Path(program).name)
    shutil.rmtree(bin_dir)
    bin_dir.mkdir()
    for program, name in recipe.wrap:
        wrapper = bin_dir / name
        wrapper.write_text(
            "#!/bin/sh\n"
            f"# orchestra: Debian {recipe.version}'s {Path(program).name}, through its own loader and libraries\n"
            'root="${0%/*}/../.."\nlib="$root/usr/lib/x86_64-linux-gnu"\n'
            f'exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" --argv0 "$0" '
            f'"$root/usr/libexec/orchestra/{Path(program).name}" "$@"\n')
        wrapper.chmod(0o755)
        if Path(program).name.startswith("python3"):
            version = Path(program).name.removeprefix("python")
            # Debian's link to /etc's sitecustomize.py would name the task image's file
            (root / f"usr/lib/python{version}/sitecustomize.py").unlink(missing_ok=True)
            site = root / "usr/lib/python3/dist-packages"
            site.mkdir(parents=True, exist_ok=True)
            (site / "orchestra_startup.py").write_text(_STARTUP)
            (site / "orchestra.pth").write_text("import orchestra_startup\n")
            subprocess.run([str(wrapper), "-m", "compileall", "-q", "-j", "0", str(root / f"usr/lib/python{version}")],
                           env=env, check=False, capture_output=True, timeout=1800)
            done = subprocess.run([str(wrapper), "-c", "import ssl, sqlite3, ctypes, lzma, bz2, zlib, readline"],
                                  env=env, capture_output=True, timeout=120)
            if done.returncode != 0:
                raise OSError(f"{program} from {recipe.version} does not start through its own loader: "
                              f"{done.stderr.decode(errors='replace')[-600:]}")


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
