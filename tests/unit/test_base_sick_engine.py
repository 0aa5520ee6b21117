"""A sick engine is not a missing image: while the engine answers 500, asking whether the
base is there raises (the trial waits for the engine, as for any engine error) instead of
starting a debootstrap of a base the engine has (a 6 s run of 500s once cost a 97 s rebuild),
and a FROM image the engine has is never stood in for."""

from __future__ import annotations

import pytest

from orchestrator.errors import RuntimeFault
from orchestrator.trial import baseimage, bases


class Sick:
    """The two questions the base check asks, answered as an engine mid-outage does."""

    def image_exists(self, ref: str) -> bool:
        raise RuntimeFault("the engine failed: 500 Server Error: injected")

    def image_facts(self, ref: str):  # noqa: ANN201
        raise RuntimeFault("the engine failed: 500 Server Error: injected")


def test_a_500_while_asking_for_the_base_raises_and_never_debootstraps(monkeypatch):
    built: list[str] = []
    monkeypatch.setattr(baseimage, "_debootstrap_import", lambda runtime, release, image: built.append(image))
    with pytest.raises(RuntimeFault):
        baseimage.bootstrap_base(Sick(), "bookworm")  # type: ignore[arg-type]
    assert built == []


def test_a_500_while_asking_for_a_from_image_raises_instead_of_calling_it_absent():
    with pytest.raises(RuntimeFault):
        bases._local(Sick(), "python:3.12-slim")  # type: ignore[arg-type]
