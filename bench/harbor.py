"""Side by side with Harbor (issue 48): the same task folder, the same agent (oracle), the
same concurrency, run by Harbor and by orchestra with default settings, cold (no task
image and no build cache) and warm (the second run), alternating which goes first. Prints
`name=value` lines; nothing is asserted (these machines are noisy: read the ratios).

    python bench/run.py harbor PATH [ROUNDS]      (or: python bench/harbor.py PATH [ROUNDS])

Harbor is installed in a throwaway venv (~/.cache/orchestra/harbor-bench-venv, harbor
HARBOR_VERSION from PyPI), never a dependency of orchestra. It needs a Python >= 3.12
(HARBOR_PYTHON, else python3.13/python3.12 on PATH, else pyenv's) and `docker compose`
(v2); where the engine's CLI lacks the plugin, Debian trixie's docker-compose package is
fetched from Debian's mirror into a private DOCKER_CONFIG for Harbor's process only.

Both tools build on the same bases: a FROM the engine lacks is stood in by orchestra's
offline bases (the Debian stand-ins), given this host's CA bundle (PyPI is reached through
a TLS-intercepting proxy on these machines: Harbor has no way to pass a CA to a build) and
tagged under the FROM name first, so Harbor's `docker compose build` finds it and orchestra
uses it as a local image (where a registry answers, nothing is tagged: both pull).

  harbor_cold_seconds / orchestra_cold_seconds   per round, each tool's whole process
  harbor_warm_seconds / orchestra_warm_seconds   the same, images kept from the cold run
  harbor_vs_orchestra_cold / _warm               the medians' ratio (issue 48: >= 3 / >= 6)
  harbor_vs_orchestra                            the cold one (what a user sees first)
  rewards_<tool>-<kind>-<round>                  rewards per task (the same, or a bug)
  rewards_same                                   1 when every run graded every task alike;
                                                 else the job folders are kept (named)
"""

from __future__ import annotations

import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.paths import JobDir  # noqa: E402  (standard library only: cheap)

HARBOR_VERSION = "0.26.0"
CACHE = Path(os.environ.get("ORCHESTRA_CACHE", Path.home() / ".cache" / "orchestra"))
VENV = CACHE / "harbor-bench-venv"
COMPOSE_DIR = CACHE / "harbor-bench-docker-config"
ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
TRIXIE = "deb http://deb.debian.org/debian trixie main\n"


def say(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


def python_312() -> str:
    """A Python >= 3.12 for Harbor's venv."""
    candidates = [os.environ.get("HARBOR_PYTHON", ""), shutil.which("python3.13") or "",
                  shutil.which("python3.12") or ""]
    pyenv = Path.home() / ".pyenv" / "versions"
    candidates += sorted((str(p) for p in pyenv.glob("3.1[2-9]*/bin/python3")), reverse=True)
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    raise SystemExit("Harbor needs Python >= 3.12: set HARBOR_PYTHON to one (none on PATH or in pyenv)")


def harbor_bin() -> Path:
    """Harbor's CLI from its throwaway venv, installed once."""
    harbor = VENV / "bin" / "harbor"
    if harbor.exists():
        return harbor
    say(f"installing harbor=={HARBOR_VERSION} into {VENV} (a throwaway venv, about a minute)")
    subprocess.run([python_312(), "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", f"harbor=={HARBOR_VERSION}"], check=True)
    return harbor


def compose_env() -> dict[str, str]:
    """The environment Harbor runs in: `docker compose` v2 reachable."""
    env = dict(os.environ)
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return env
    plugin = COMPOSE_DIR / "cli-plugins" / "docker-compose"
    if not plugin.exists():
        say("the docker CLI has no compose plugin: taking Debian trixie's docker-compose package")
        with tempfile.TemporaryDirectory() as work:
            apt = Path(work)
            (apt / "sources.list").write_text(TRIXIE)
            (apt / "lists" / "partial").mkdir(parents=True)
            (apt / "cache" / "archives" / "partial").mkdir(parents=True)
            opts = ["-o", f"Dir::Etc::SourceList={apt}/sources.list", "-o", "Dir::Etc::SourceParts=/dev/null",
                    "-o", f"Dir::State::Lists={apt}/lists", "-o", f"Dir::Cache={apt}/cache"]
            subprocess.run(["apt-get", *opts, "update"], check=True, capture_output=True)
            subprocess.run(["apt-get", *opts, "download", "docker-compose"], check=True, capture_output=True,
                           cwd=work)
            (deb,) = apt.glob("docker-compose_*.deb")
            subprocess.run(["dpkg-deb", "-x", str(deb), str(apt / "x")], check=True)
            plugin.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(apt / "x/usr/libexec/docker/cli-plugins/docker-compose", plugin)
    env["DOCKER_CONFIG"] = str(COMPOSE_DIR)
    return env


def stand_in_bases(runtime, api, tasks: list, tagged: list[str]) -> None:
    """Each FROM the engine lacks and no registry serves: orchestra's stand-in, tagged under
    the FROM name; the names tagged go into `tagged` (removed again at the end, whatever
    happens)."""
    from orchestrator.tasks.standins import choose
    from orchestrator.trial.baseimage import bootstrap_base
    from orchestrator.trial.bases import base_references

    refs = sorted({ref for task in tasks for folder in (task.path / "environment", task.path / "tests")
                   if (folder / "Dockerfile").is_file()
                   for ref in base_references((folder / "Dockerfile").read_text())})
    for ref in refs:
        if runtime.image_exists(ref):
            continue
        try:
            runtime.pull(ref, timeout_sec=300)
            continue
        except Exception:  # PullFailed (no registry answers here) or anything else: stand in
            pass
        chosen = choose(ref)
        if chosen is None:
            raise SystemExit(f"FROM {ref}: not on the engine, not pullable, and no stand-in: pick other tasks")
        bootstrap_base(runtime, chosen.release)
        trusting_host_ca(api, chosen.stand_in, ref)
        tagged.append(ref)
        say(f"FROM {ref}: stood in by {chosen.stand_in} ({chosen.reason}), trusting {HOST_CA}")


def trusting_host_ca(api, stand_in: str, ref: str) -> None:
    """`ref`: the stand-in with this host's CA bundle as its own, for pip and requests too.
    Where PyPI is reached through a TLS-intercepting proxy (this machine), a build's `pip
    install` fails on an image that does not trust it; orchestra can pass a CA to a build,
    Harbor cannot, so both get a base that trusts it (as a machine whose network needs no
    such CA would give them both a working pip)."""
    bundle = Path(HOST_CA).read_bytes() if Path(HOST_CA).is_file() else b""
    dockerfile = (f"FROM {stand_in}\nCOPY ca.crt {HOST_CA}\n"
                  f"ENV PIP_CERT={HOST_CA} SSL_CERT_FILE={HOST_CA} REQUESTS_CA_BUNDLE={HOST_CA}\n").encode()
    from orchestrator.archive import tar_files

    context = io.BytesIO(tar_files({"Dockerfile": dockerfile, "ca.crt": bundle}))
    for chunk in api.build(fileobj=context, custom_context=True, tag=ref, rm=True, decode=True):
        if "error" in chunk:
            raise SystemExit(f"FROM {ref}: the stand-in with the host's CA did not build: {chunk['error']}")


def make_cold(api, keep: set[str]) -> None:
    """Every image made since `keep` was taken (both tools' task, agent and verifier images),
    and the engine's build cache: the next run builds everything."""
    for image in api.images(all=False):
        if image["Id"] not in keep:
            try:
                api.remove_image(image["Id"], force=True)
            except Exception:  # a parent already removed with its child
                pass
    subprocess.run(["docker", "builder", "prune", "-af"], capture_output=True)


def run_harbor(harbor: Path, env: dict[str, str], path: Path, jobs: Path, name: str,
               n: int) -> tuple[float, dict[str, float | None]]:
    started = time.perf_counter()
    proc = subprocess.run([str(harbor), "run", "-p", str(path), "-a", "oracle", "-n", str(n), "-y", "-q",
                           "--jobs-dir", str(jobs), "--job-name", name],
                          env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        say(f"harbor exited {proc.returncode}: {proc.stderr[-800:]}")
    rewards: dict[str, float | None] = {}
    for result in (jobs / name).glob("*/result.json"):
        data = json.loads(result.read_text())
        task = data.get("task_name") or result.parent.name.split("__")[0]
        verifier = data.get("verifier_result") or {}
        values = verifier.get("rewards") or {}
        rewards[task.split("/")[-1]] = values.get("reward") if isinstance(values, dict) else None
    return wall, rewards


def run_orchestra(path: Path, jobs: Path, name: str, n: int,
                  durations: Path) -> tuple[float, dict[str, float | None]]:
    """`orchestra run` with default settings; `durations` is this round's own record of
    trial times (empty before its cold run: a first run on a new dataset knows none, its
    warm run knows the cold run's, as a second run would)."""
    started = time.perf_counter()
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(path), "--agent", "oracle", "-n", str(n), "-q",
                           "--jobs-dir", str(jobs), "--job-name", name], capture_output=True, text=True,
                          env={**os.environ, "ORCHESTRA_DURATIONS": str(durations)})
    wall = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        say(f"orchestra exited {proc.returncode}: {proc.stderr[-800:]}")
    rewards: dict[str, float | None] = {}
    for result in JobDir(jobs / name).trial_results():
        data = json.loads(result.read_text())
        rewards[data["task"].split("/")[-1]] = (data.get("reward") or {}).get("reward")
    return wall, rewards


def side_by_side(path: Path, emit: Callable[[str, object], None], rounds: int = 2, n: int = 2) -> None:
    import docker

    from orchestrator.runtime.docker import DockerRuntime
    from orchestrator.tasks.load import load_tasks

    runtime = DockerRuntime()
    api = docker.APIClient(timeout=300)  # docker-py's own client: listing, tagging, removing
    tasks = load_tasks(path)
    harbor, env = harbor_bin(), compose_env()
    emit("harbor_tasks", len(tasks))
    emit("harbor_concurrency", n)
    seconds: dict[str, list[float]] = {f"{tool}_{kind}": [] for tool in ("harbor", "orchestra")
                                       for kind in ("cold", "warm")}
    rewards: dict[str, dict[str, float | None]] = {}
    tagged: list[str] = []
    jobs = Path()
    try:
        stand_in_bases(runtime, api, tasks, tagged)
        keep = {image["Id"] for image in api.images(all=False)
                if not any(tag.startswith(("orchestra/task/", "orchestra/verifier/"))
                           for tag in image.get("RepoTags") or [])}
        jobs = Path(tempfile.mkdtemp(prefix="bench-harbor-"))  # kept when rewards differ (below)
        for r in range(rounds):
            order = ("harbor", "orchestra") if r % 2 == 0 else ("orchestra", "harbor")
            for tool in order:
                make_cold(api, keep)
                for kind in ("cold", "warm"):
                    name = f"{tool}-{kind}-{r}"
                    if tool == "harbor":
                        wall, got = run_harbor(harbor, env, path, jobs, name, n)
                    else:
                        wall, got = run_orchestra(path, jobs, name, n, jobs / f"durations-{r}.json")
                    seconds[f"{tool}_{kind}"].append(round(wall, 1))
                    rewards[name] = got
                    say(f"round {r}: {name} {wall:.1f} s, mean reward "
                        f"{statistics.mean([v or 0.0 for v in got.values()] or [0.0]):.2f} over {len(got)}")
        make_cold(api, keep)
    finally:
        for ref in tagged:
            try:
                api.remove_image(ref)
            except Exception:
                pass
    for key, values in seconds.items():
        emit(f"{key}_seconds", json.dumps(values))
    for kind in ("cold", "warm"):
        ratio = statistics.median(seconds[f"harbor_{kind}"]) / statistics.median(seconds[f"orchestra_{kind}"])
        emit(f"harbor_vs_orchestra_{kind}", round(ratio, 2))
    emit("harbor_vs_orchestra", round(statistics.median(seconds["harbor_cold"])
                                      / statistics.median(seconds["orchestra_cold"]), 2))
    for key, got in sorted(rewards.items()):  # every run's, per task (the same, or a bug)
        emit(f"rewards_{key}", json.dumps(dict(sorted(got.items()))))
    names = {t.path.name for t in tasks}
    same = all(got.get(task) == rewards["harbor-cold-0"].get(task) for got in rewards.values() for task in names)
    emit("rewards_same", int(same))
    if same:
        shutil.rmtree(jobs, ignore_errors=True)
    else:  # a faster job that grades differently is a bug: keep every trial's evidence
        emit("rewards_differ_jobs_kept", str(jobs))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    side_by_side(Path(sys.argv[1]).resolve(), lambda key, value: print(f"{key}={value}", flush=True),
                 int(sys.argv[2]) if len(sys.argv) > 2 else 2)
