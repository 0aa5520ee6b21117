"""Which offline base stands in for a FROM reference this engine lacks (DESIGN 5).

Where no registry answers a pull (or under --bases offline), a task whose Dockerfile starts
FROM an image the engine does not have is built on one of orchestra's own bases instead,
chosen by rule rather than by a list of exact strings: the reference is parsed (registry host and library path,
repository, tag, digest) and the nearest Debian release is picked.

  python:<version>[-<variant>]-<release>    the release the tag names (its apt pins and
                                            packages are the task's); a python version that
                                            release cannot give is said plainly (a warning)
  python:<version>[-<variant>]              the release whose python is nearest the version
                                            (3.13+ trixie, 3.11-3.12 bookworm, <=3.10 bullseye);
                                            no version (python:3, latest, slim): trixie
  debian:<release|number>[-slim]            that release (buster and older: bullseye)
  buildpack-deps:<release>                  that release
  ubuntu:<version|codename>                 the nearest Debian (20.04 bullseye, 22.04 bookworm,
                                            24.04 and later trixie), said plainly
  any image named after one of those        (e.g. ghcr.io/org/ubuntu-24-04) the same, said to
                                            be a guess from the name

Alpine, Windows and everything else get no stand-in (the build then fails, saying so).
A digest-pinned reference is stood in for with a warning: the stand-in is not that image.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from orchestrator.models import StandInRecord
from orchestrator.util import JsonObject

RELEASES = {"bullseye": "3.9", "bookworm": "3.11", "trixie": "3.13"}  # Debian release -> python3
DEBIAN_NUMBERS = {"9": "bullseye", "10": "bullseye", "11": "bullseye", "12": "bookworm", "13": "trixie"}
DEBIAN_NAMES = {"stretch": "bullseye", "buster": "bullseye", "bullseye": "bullseye",
                "bookworm": "bookworm", "trixie": "trixie", "stable": "trixie", "testing": "trixie",
                "sid": "trixie", "unstable": "trixie", "latest": "trixie"}
UBUNTU_NAMES = {"focal": "20.04", "jammy": "22.04", "noble": "24.04", "oracular": "24.10",
                "plucky": "25.04", "questing": "25.10", "latest": "24.04", "rolling": "25.10"}
HUB_MIRRORS = ("docker.io/", "index.docker.io/", "registry-1.docker.io/", "public.ecr.aws/docker/",
               "mirror.gcr.io/", "registry.hub.docker.com/")
_VERSION = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_NOT_DEBIAN = ("alpine", "windowsservercore", "nanoserver", "musl")


def base_image(release: str) -> str:
    return f"orchestra/base:{release}"


@dataclass(frozen=True)
class Reference:
    """A parsed image reference: [registry/]repository[:tag][@digest]."""

    registry: str | None
    repository: str  # Docker Hub's library/ prefix and mirrors removed: "python", "org/img"
    tag: str
    digest: str | None


def parse_reference(ref: str) -> Reference:
    name, _, digest = ref.partition("@")
    registry = None
    for mirror in HUB_MIRRORS:
        if name.startswith(mirror):
            name = name[len(mirror):]
            break
    else:
        first, sep, rest = name.partition("/")
        if sep and ("." in first or ":" in first or first == "localhost"):
            registry, name = first, rest
    last_slash = name.rfind("/")
    repository, tag = name, "latest"
    if name.rfind(":") > last_slash:
        repository, tag = name.rsplit(":", 1)
    if registry is None and repository.startswith("library/"):
        repository = repository[len("library/"):]
    return Reference(registry=registry, repository=repository.lower(), tag=tag.lower(),
                     digest=digest or None)


@dataclass(frozen=True)
class StandIn:
    """What stands in for a reference, and why (recorded in each trial's result)."""

    reference: str
    stand_in: str  # orchestra/base:<release>
    release: str
    python: str
    reason: str
    warning: str | None = None

    def as_dict(self) -> JsonObject:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def record(self) -> StandInRecord:
        """As each trial's result records it."""
        return StandInRecord(reference=self.reference, stand_in=self.stand_in, release=self.release,
                             python=self.python, reason=self.reason, warning=self.warning)


def choose(ref: str) -> StandIn | None:
    """The nearest offline base for `ref`, or None when none is near enough."""
    parsed = parse_reference(ref)
    family, guessed = _family(parsed)
    if family is None or any(word in parsed.tag or word in parsed.repository for word in _NOT_DEBIAN):
        return None
    tag = parsed.tag
    if guessed:  # ghcr.io/org/ubuntu-24-04:20250620: the version is in the name
        suffix = re.sub(r"(?<=\d)-(?=\d)", ".", parsed.repository.rsplit("/", 1)[-1][len(family) + 1:])
        tag = suffix if suffix[:1].isdigit() or tag == "latest" and suffix else tag
    release, why = _RULES[family](tag)
    if guessed:
        why += f" (a guess from the image's name, {parsed.repository})"
    warning = None
    asked = _VERSION.match(tag) if family == "python" else None
    if asked and asked.group(2) and f"{asked.group(1)}.{asked.group(2)}" != RELEASES[release]:
        warning = (f"python {RELEASES[release]}, NOT the python {asked.group(1)}.{asked.group(2)} "
                   f"the tag names ({release} has no other)")
    if parsed.digest:
        pinned = (f"{ref} is pinned by digest; {base_image(release)} is not that image, so what the "
                  "pin guarantees (exact packages, versions) does not hold here")
        warning = f"{pinned}; {warning}" if warning else pinned
    return StandIn(reference=ref, stand_in=base_image(release), release=release,
                   python=RELEASES[release], reason=why, warning=warning)


def _family(parsed: Reference) -> tuple[str | None, bool]:
    """python, debian, ubuntu or buildpack-deps, and whether only the name suggested it."""
    name = parsed.repository
    if name in ("python", "debian", "ubuntu", "buildpack-deps"):
        return name, False
    last = name.rsplit("/", 1)[-1]
    for family in ("python", "debian", "ubuntu"):
        if last == family or last.startswith(family + "-") or last.startswith(family + "_"):
            return family, True
    return None, False


def _tokens(tag: str) -> list[str]:
    return [t for t in re.split(r"[-_]", tag) if t]


def _release_named(tag: str) -> str | None:
    for token in _tokens(tag):
        if token in DEBIAN_NAMES and token != "latest":
            return DEBIAN_NAMES[token]
    return None


def _python(tag: str) -> tuple[str, str]:
    match = _VERSION.match(tag)
    named = _release_named(tag)
    if not match:
        release = "trixie"
        return release, (f"python with no version named ({tag}): the newest stand-in, "
                         f"{release} (python {RELEASES[release]})")
    major, minor = int(match.group(1)), int(match.group(2) or 99)
    wanted = f"{major}.{match.group(2)}" if match.group(2) else str(major)
    if named:  # the tag's release decides (its apt pins and packages); the python is said
        if RELEASES[named] == wanted:
            return named, f"python {wanted} on {named}, as the tag names"
        return named, (f"python {wanted} on {named} asked; the tag's release decides, and "
                       f"{named}'s python is {RELEASES[named]}")
    if major < 3 or (major == 3 and minor <= 10):
        release = "bullseye"
    elif major == 3 and minor <= 12:
        release = "bookworm"
    else:
        release = "trixie"
    return release, f"python {wanted} asked; {release}'s python is {RELEASES[release]}, the nearest"


def _debian(tag: str) -> tuple[str, str]:
    named = _release_named(tag)
    if named is None:
        match = _VERSION.match(tag)
        named = DEBIAN_NUMBERS.get(match.group(1)) if match else None
    if named is None and tag in ("latest", "stable"):
        return "trixie", f"debian:{tag} is Debian 13, trixie, today"
    if named is None:
        return "bookworm", f"debian:{tag} names no release orchestra knows; bookworm stands in"
    if named not in tag and any(old in tag for old in ("buster", "stretch", "9", "10")):
        return named, f"debian:{tag} is older than any stand-in; {named}, the oldest, stands in"
    return named, f"Debian {named}"


def _ubuntu(tag: str) -> tuple[str, str]:
    version = UBUNTU_NAMES.get(_tokens(tag)[0] if _tokens(tag) else "latest", tag)
    match = re.match(r"^(\d+)[.-]?(\d+)?", version)
    year = int(match.group(1)) if match else 24
    release = "bullseye" if year < 22 else "bookworm" if year < 24 else "trixie"
    return release, (f"Ubuntu {version} is not Debian: {release} (python {RELEASES[release]}) is "
                     "the nearest Debian release; Ubuntu-only packages (and PPAs) will not install")


_RULES = {"python": _python, "debian": _debian, "buildpack-deps": _debian, "ubuntu": _ubuntu}
