"""Stand-ins behave like what they stand for (issue 25): one probe of the official python
images' documented properties, run against every stand-in base: bookworm, trixie and
bullseye (`make test` bootstraps all three; one missing is built here), with no network."""

import json

import pytest

from orchestrator.runtime.base import ContainerSpec
from orchestrator.tasks.standins import RELEASES
from orchestrator.trial.baseimage import bootstrap_base

PROBE = r"""
set -e
for c in python python3 pip pip3; do command -v $c >/dev/null || { echo "missing $c"; exit 1; }; done
test -x /usr/local/bin/python3 || { echo "no /usr/local/bin/python3"; exit 1; }
cd /tmp
python3 - <<'PY'
import json, locale, os, subprocess, sys, sysconfig, zipfile
out = {"python": "%d.%d" % sys.version_info[:2], "lang": os.environ.get("LANG"),
       "fs_encoding": sys.getfilesystemencoding(), "preferred": locale.getpreferredencoding(False)}
import ssl, sqlite3, ctypes, venv, ensurepip, zlib, bz2, lzma, hashlib  # the stdlib the images ship
out["externally_managed"] = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
store = "/etc/ssl/certs/ca-certificates.crt"
out["ca_certs"] = open(store).read().count("BEGIN CERTIFICATE") if os.path.exists(store) else 0
out["default_verify_paths"] = os.path.exists(ssl.get_default_verify_paths().openssl_cafile or "")
# a wheel made here, installed with plain `pip install` (no --break-system-packages), offline
with zipfile.ZipFile("demo-0.1-py3-none-any.whl", "w") as w:
    w.writestr("demo_probe.py", "VALUE = 42\n")
    w.writestr("demo-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 0.1\n")
    w.writestr("demo-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: probe\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    w.writestr("demo-0.1.dist-info/RECORD", "demo_probe.py,,\ndemo-0.1.dist-info/METADATA,,\ndemo-0.1.dist-info/WHEEL,,\ndemo-0.1.dist-info/RECORD,,\n")
pip = subprocess.run(["pip", "install", "--no-index", "--no-cache-dir", "demo-0.1-py3-none-any.whl"], capture_output=True, text=True)
out["pip_install"] = pip.returncode
out["pip_error"] = pip.stderr[-300:]
out["imported"] = subprocess.run([sys.executable, "-c", "import demo_probe; print(demo_probe.VALUE)"], capture_output=True, text=True).stdout.strip()
venv_made = subprocess.run([sys.executable, "-m", "venv", "/tmp/v"], capture_output=True, text=True)
out["venv"] = venv_made.returncode
out["venv_pip"] = subprocess.run(["/tmp/v/bin/pip", "--version"], capture_output=True).returncode if venv_made.returncode == 0 else None
out["pip_version"] = subprocess.run(["pip3", "--version"], capture_output=True, text=True).stdout.split(" from")[0]
# the official layout: the interpreter, its stdlib and headers under /usr/local
v = "python%d.%d" % sys.version_info[:2]
out["executable"] = os.path.realpath(sys.executable)
out["prefix"] = sys.prefix
out["stdlib"] = os.path.dirname(os.__file__)
out["headers"] = os.path.exists(f"/usr/local/include/{v}/Python.h") and os.path.exists(f"/usr/local/include/{v}/pyconfig.h")
out["purelib"] = sysconfig.get_paths()["purelib"]
out["on_path"] = {c: os.path.realpath(subprocess.run(["sh", "-c", f"command -v {c}"], capture_output=True, text=True).stdout.strip()) for c in ("python", "python3", "pip")}
import importlib.metadata as md
out["records"] = sorted(d.metadata["Name"] for d in md.distributions() if d.read_text("RECORD"))
out["debian_paths"] = [p for p in sys.path if p.startswith("/usr/lib")]
out["debian_python_packages"] = subprocess.run(["sh", "-c", "dpkg-query -W -f '${Package}\\n' | grep -E '^(python3|libpython3)' | grep -v -- -whl$"], capture_output=True, text=True).stdout.split()
print(json.dumps(out))
PY
"""


@pytest.mark.parametrize("release", [pytest.param(r, marks=pytest.mark.part(f"standin-{r}")) for r in RELEASES])
def test_every_stand_in_behaves_like_an_official_python_image(runtime, release):
    image = bootstrap_base(runtime, release)
    name = f"orchestra-probe-{release}"
    spec = ContainerSpec(image=image, name=name, labels={"orchestra.kind": "probe", "orchestra.job": "probe"},
                       command=["sleep", "300"], cpus=1.0, memory_mb=512, pids_limit=256, network="none")
    container = runtime.create(spec)
    try:
        runtime.start(container)
        done = runtime.exec(container, ["sh", "-c", PROBE], capture=65536)
        text = done.output.decode(errors="replace")
        assert done.exit_code == 0, text
        found = json.loads(text.strip().splitlines()[-1])
    finally:
        runtime.remove(container)
    assert found["python"] == RELEASES[release]
    assert (found["lang"], found["fs_encoding"], found["preferred"]) == ("C.UTF-8", "utf-8", "UTF-8")
    assert found["externally_managed"] is False
    assert found["pip_install"] == 0, found["pip_error"]
    assert found["imported"] == "42"
    assert found["venv"] == 0 and found["venv_pip"] == 0
    assert found["ca_certs"] > 100 and found["default_verify_paths"]
    v = f"python{RELEASES[release]}"
    assert found["executable"] == f"/usr/local/bin/{v}" and found["prefix"] == "/usr/local"
    assert found["stdlib"] == f"/usr/local/lib/{v}" and found["headers"] is True
    assert found["purelib"] == f"/usr/local/lib/{v}/site-packages"
    assert found["on_path"] == {"python": f"/usr/local/bin/{v}", "python3": f"/usr/local/bin/{v}",
                                "pip": "/usr/local/bin/pip"}
    # pip, and setuptools where the official image has it (before 3.12), installed by pip
    minor = int(RELEASES[release].split(".")[1])
    assert {"pip", *(["setuptools"] if minor < 12 else [])} <= set(found["records"]), found["records"]
    assert found["debian_paths"] == [] and found["debian_python_packages"] == [], found
    labels = runtime.image_facts(image).labels
    assert labels["orchestra.base.python"] == RELEASES[release]


UPGRADE = r"""set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null && apt-get install -y -qq asciinema >/dev/null
test -d /usr/lib/python3/dist-packages   # Debian's python packages came in with it
pip install -q --upgrade packaging typing_extensions
python3 -c 'import os, packaging, typing_extensions; print(os.path.realpath(packaging.__file__))'
"""


@pytest.mark.part("network-containers")
@pytest.mark.parametrize("release", list(RELEASES))
def test_pip_upgrades_what_a_tasks_apt_get_pulled_in_for_debians_python(runtime, release, container_network):
    """The 15 real tasks lost to "uninstall-no-record-file": an `apt-get install` that brings
    Debian's python3-packaging and python3-typing-extensions, then `pip install --upgrade` of
    them. On the official image pip never sees Debian's copies; on the stand-in neither."""
    import subprocess

    from conftest import HOST_CA, needs_container_network

    needs_container_network(container_network)
    image = bootstrap_base(runtime, release)
    ca = (["-v", f"{HOST_CA}:/etc/ssl/certs/ca-certificates.crt:ro", "-e", "PIP_CERT=/etc/ssl/certs/ca-certificates.crt"]
          if container_network == "intercepted" else [])
    done = subprocess.run(["docker", "run", "--rm", "--label", "orchestra.kind=probe", *ca, image,
                           "bash", "-c", UPGRADE], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    assert done.stdout.strip().splitlines()[-1].startswith(f"/usr/local/lib/python{RELEASES[release]}/site-packages/packaging/")
