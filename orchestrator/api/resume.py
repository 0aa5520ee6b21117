"""`orchestra run --resume JOB_DIR`: the job folder's own options take over the request's.

A job folder is input (DESIGN 4): its config.json gives the tasks' path, the line-up
(refused if it no longer gives the condition hash the job ran with), policy, layer and k;
the endpoint files it names never win over the user's own config unless the user says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.api.say import Say, silent
from orchestrator.errors import InputError
from orchestrator.models import JobSource
from orchestrator.paths import JobDir

if TYPE_CHECKING:
    from orchestrator.api.runs import RunRequest
    from orchestrator.models import Manifest


def take_over_resumed(a: RunRequest, note: Say = silent) -> tuple[RunRequest, JobSource, Manifest]:
    """resume: the job's own path, folder, condition, policy, layer, k and endpoints replace
    the request's (a changed manifest is refused: two conditions in one job). Returns the
    request so changed, the job's source and its line-up."""
    from pydantic import ValidationError

    from orchestrator.errors import validation_problems
    from orchestrator.models import JobConfig, Manifest

    assert a.resume is not None
    config_file = JobDir(a.resume).config
    if not config_file.is_file():
        raise InputError(f"{config_file}: not a job folder (no config.json)")
    try:
        config = JobConfig.model_validate_json(config_file.read_text())
        lineup = Manifest.model_validate(config.manifest)
    except ValidationError as exc:  # the manifest's fields are named under 'manifest.'
        prefix = "manifest." if exc.title == "Manifest" else ""
        raise InputError(validation_problems(config_file, exc, prefix)) from None
    source = config.source
    if config.condition_hash and lineup.condition_hash() != config.condition_hash:
        raise InputError(f"{config_file}: field 'manifest': it no longer gives the "
                         f"condition hash {config.condition_hash[:12]} this job ran "
                         "with; resume would mix two conditions. Start a new job.")
    taken = a.model_copy(update={
        "path": Path(source.path) if source.path else a.path,
        "jobs_dir": a.resume.parent, "job_name": a.resume.name,
        "policy": config.policy, "layer": source.layer,
        "k": None if config.k is None else str(config.k),
        "endpoints": resumed_endpoints(a, [Path(p) for p in source.endpoints], note)})
    return taken, source, lineup


def resumed_endpoints(a: RunRequest, recorded: list[Path], note: Say = silent) -> list[Path] | None:
    """A job folder is input (DESIGN 4): the endpoint files its config.json names never win
    over the user's. endpoints given: those. Otherwise the user's own config (the default
    endpoints/*.json), and the job's files are said; where they define an endpoint the user's
    config lacks or defines otherwise (another base URL, key variable, model), the resume is
    refused unless trust_job_endpoints says to use them."""
    from orchestrator.models import default_endpoint_files, load_endpoints

    if a.endpoints or not recorded:
        return a.endpoints
    try:
        theirs = load_endpoints(recorded).endpoints
    except InputError as exc:
        note(f"--resume: the endpoint files the job folder names are not readable ({exc}); "
             "using your own endpoint config")
        return a.endpoints
    note("--resume: the job folder names endpoint files " + ", ".join(map(str, recorded)) + ": "
         + ", ".join(f"{n} -> {e.base_url or e.provider}" for n, e in sorted(theirs.items())))
    mine_files = [p.resolve() for p in default_endpoint_files()]
    mine = load_endpoints(mine_files).endpoints if mine_files else {}
    differ = sorted(n for n, e in theirs.items() if n not in mine or mine[n].model_dump() != e.model_dump())
    if not differ:
        return a.endpoints  # the same endpoints: the user's own files serve them
    if not a.trust_job_endpoints:
        raise InputError(f"--resume {a.resume}: the job folder's endpoint files define "
                         f"{', '.join(differ)} otherwise than your endpoint config "
                         f"({', '.join(map(str, mine_files)) or 'none'}) does (base URL, key "
                         "variable or model); pass --endpoints to choose yours, or "
                         "--trust-job-endpoints to use the job's")
    note(f"--resume: --trust-job-endpoints: using the job folder's endpoints for {', '.join(differ)}")
    return recorded
