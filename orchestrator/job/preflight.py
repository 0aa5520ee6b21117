"""Pre-flight, before any spend: what the job asks of the host, its endpoints and the
engine's capabilities, every problem at once (InputError, exit 2); a manifest's sandbox
policy joined with the command line's."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.errors import InputError
from orchestrator.job.options import JobOptions
from orchestrator.job.scheduler import Admission
from orchestrator.log import get_logger
from orchestrator.models import EndpointConfig, Manifest
from orchestrator.runtime import Capabilities, EngineFacts, Part, Runtime
from orchestrator.scrub import refusal, too_short
from orchestrator.tasks import Task
from orchestrator.trial import EnvTemplateError, resolve_env

log = get_logger()


def preflight(tasks: list[Task], manifest: Manifest, endpoints: EndpointConfig | None = None,
              admission: Admission | None = None) -> set[str]:
    """Refuse, before any container starts, what cannot run. Returns the endpoints in use."""
    problems = []
    lead = manifest.orchestrator
    in_use = {m.endpoint for m in manifest.roster if m.endpoint}
    if lead.agent == "oracle":
        problems += [f"{t.path / 'solution/solve.sh'}: missing (the oracle agent needs it)"
                     for t in tasks if not t.has_solution]
    if lead.agent == "reference" and not lead.endpoint:
        problems.append(f"roster.{lead.id}.endpoint: required for agent: reference")
    if in_use and endpoints is None:
        problems.append("the manifest names endpoints but no endpoint config was given (--endpoints)")
    elif endpoints is not None:
        for name in sorted(in_use):
            try:
                endpoints.resolve(name)
                key = endpoints.api_key(name)
            except InputError as exc:
                problems.extend(exc.problems)
                continue
            if too_short(key):  # the proxy and every file would have to scrub it: it cannot
                problems.append(f"endpoint {name!r}: the API key in ${endpoints.resolve(name).api_key_env}: "
                                f"{refusal(key or '')}")
    for t in tasks:  # Harbor's ${VAR} templates in verifier.env (each step's too) must resolve here
        for where, env in [("", t.config.verifier.env),
                           *((f"steps[{i}].", s.verifier.env) for i, s in enumerate(t.config.steps or []))]:
            try:
                resolve_env(env)
            except EnvTemplateError as exc:
                problems.append(f"{t.paths.config}: field '{where}{exc.field}': {exc.reason}")
            except InputError as exc:  # an allowed value too short to scrub (names task.toml)
                problems.extend(f"{t.path}/{problem}" for problem in exc.problems)
    if problems:
        raise InputError(problems)
    return in_use

REQUIRABLE = {"disk-quota": "disk_quota", "host-isolation": "host_isolation"}

def unbounded_volumes(tasks: list[Task], caps: Capabilities) -> list[str]:
    """A compose named volume is a folder of the trial's loop disk, held to storage_mb; an
    engine without loop disks would make it an engine volume bounded by nothing (301 MB
    written past a 256 MB limit, graded 1.0): such a task is refused, not run unbounded."""
    if "disk_quota" not in caps.why:
        return []
    return [f"{t.path / 'environment/docker-compose.yaml'}: field 'volumes.{volume}': a named volume "
            f"is held to storage_mb ({t.config.environment.storage_mb} MB) only on a loop disk, and "
            f"this engine has none ({caps.why['disk_quota']}): refused rather than run unbounded"
            for t in tasks if t.compose is not None for volume in t.compose.volumes]


def parts_needed(tasks: list[Task], options: JobOptions,
                 manifest: Manifest | None = None) -> dict[Part, str]:
    """The runtime's optional parts (runtime.base.Part) this job will call, each with the
    first reason: every job reaps orphans (listing) and runs the disk watchdog (layer
    sizes); the rest follow from the options, the roster and the tasks (a step's own
    network policy is not looked at)."""
    needs = {Part.LISTING: "the job's reaper", Part.LAYER_SIZES: "the job's disk watchdog"}
    if options.registry:
        needs[Part.REGISTRY] = f"--registry {options.registry}"
    if manifest is not None:
        if any(m.kind != "orchestrator" and m.agent != "nop" for m in manifest.roster):
            needs[Part.SPAWN] = "the manifest's workers"
        if manifest.orchestrator.agent.startswith("acp"):
            needs[Part.ATTACH] = f"agent {manifest.orchestrator.agent} (spoken to over its stdio)"
    for task in tasks:
        config, where = task.config, task.paths.config
        modes = {config.verifier.environment_mode, *(s.verifier.environment_mode for s in config.steps or [])}
        if "snapshot" in modes:
            needs.setdefault(Part.COMMIT, f"{where}: verifier environment_mode = snapshot")
        if "shared" in modes and config.network_for("verifier") != config.network_for("agent"):
            needs.setdefault(Part.NETWORK_SWITCH, f"{where}: the verifier's network differs from the agent's")
        if task.compose is not None and any(s.depends_on for s in task.compose.services.values()):
            needs.setdefault(Part.HEALTH, f"{where}: compose depends_on")
    return needs


def with_sandbox_policy(options: JobOptions, manifest: Manifest) -> JobOptions:
    """The manifest's `sandbox` joins the command line's: its OCI runtime is the default
    (a different --oci-runtime would weaken what the suite requires: refused), its `require`
    adds to --require."""
    policy = manifest.sandbox
    if policy.oci_runtime and options.oci_runtime and options.oci_runtime != policy.oci_runtime:
        raise InputError(f"--oci-runtime {options.oci_runtime}: the manifest's sandbox.oci_runtime is "
                         f"{policy.oci_runtime!r}, which its suite requires; drop --oci-runtime or use that")
    return replace(options, oci_runtime=options.oci_runtime or policy.oci_runtime,
                   require=sorted(set(options.require) | set(policy.require)))

def check_capabilities(runtime: Runtime, options: JobOptions, engine: EngineFacts | None = None,
                       tasks: list[Task] | None = None, manifest: Manifest | None = None) -> Capabilities:
    """Pre-flight on what the runtime declares, before any spend: what the job asks for and
    the engine lacks (an optional part, an OCI runtime, a --require) is exit 2 (every such
    problem at once); what it will enforce more weakly than it could elsewhere is said
    once, here, and recorded in the job's result."""
    caps = runtime.capabilities(engine)
    problems = unbounded_volumes(tasks or [], caps)
    problems += [f"{why}: needs the runtime's '{part}' part, which {type(runtime).__name__} does not "
                 "have (Capabilities.parts)"
                 for part, why in parts_needed(tasks or [], options, manifest).items() if part not in caps.parts]
    if options.oci_runtime and options.oci_runtime not in caps.oci_runtimes:
        problems.append(f"--oci-runtime {options.oci_runtime}: the engine has no such runtime "
                        f"(it has: {', '.join(caps.oci_runtimes)}); install it "
                        "(gVisor: https://gvisor.dev/docs/user_guide/install/) and register it in "
                        "daemon.json (`orchestra tasks check` prints the lines)")
    for need in options.require:
        held = REQUIRABLE[need]
        if held in caps.why:
            problems.append(f"--require {need}: this engine cannot enforce it ({caps.why[held]})")
    if options.registry and Part.REGISTRY in caps.parts and \
            (refused := runtime.registry_refusal(options.registry)):
        problems.append(f"--registry {options.registry}: the registry refused the Docker config's "
                        f"credentials ({refused}); `docker login {options.registry.split('/')[0]}` "
                        "or set DOCKER_CONFIG")
    if problems:
        raise InputError(problems)
    for held, why in sorted(caps.why.items()):
        name = next(k for k, v in REQUIRABLE.items() if v == held)
        log.warning("capability.missing", capability=name, why=why,
                    message=f"{name}: not enforced on this engine ({why}); --require {name} makes this an error")
    return caps
