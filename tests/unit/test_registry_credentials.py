"""Registry credentials go only to registries the user names (issue 56): a dataset picks its
FROM references, so a build or pull of one on another registry is sent none. docker-py's
own header code runs here on a Docker config of the test's own; no engine is needed."""

from __future__ import annotations

import base64
import json

import pytest

from orchestrator.runtime import client, registries


@pytest.fixture
def config(tmp_path, monkeypatch):
    auths = {"https://index.docker.io/v1/": {"auth": base64.b64encode(b"hubuser:hubpass").decode()},
             "private.example:5000": {"auth": base64.b64encode(b"me:secret").decode()},
             "mine.example": {"auth": base64.b64encode(b"me:mine").decode()}}
    (tmp_path / "config.json").write_text(json.dumps({"auths": auths}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv(registries.REGISTRY_AUTH_ENV, raising=False)
    monkeypatch.setattr(registries, "_NAMED", set())


def build_credentials() -> dict:
    api = client._Counted(base_url="unix:///nonexistent.sock", version="1.41")  # never connects
    headers: dict[str, str] = {}
    api._set_auth_headers(headers)
    if "X-Registry-Config" not in headers:
        return {}
    return json.loads(base64.urlsafe_b64decode(headers["X-Registry-Config"]))


def test_a_build_sends_no_credentials_unless_the_user_names_the_registry(config, monkeypatch):
    import docker
    # the positive control: docker-py itself would send a build every credential it holds
    every = docker.auth.load_config().get_all_credentials()
    assert {"private.example:5000", "mine.example"} <= set(every)
    assert build_credentials() == {}
    monkeypatch.setenv(registries.REGISTRY_AUTH_ENV, "mine.example")
    assert set(build_credentials()) == {"mine.example"}
    registries.trust_registry("private.example:5000/orchestra")  # the job's --registry
    assert set(build_credentials()) == {"mine.example", "private.example:5000"}


def test_a_pull_sends_credentials_only_to_a_trusted_registry(config, monkeypatch):
    assert client.pull_auth("private.example:5000/secret/image") == {}  # sent none
    assert client.pull_auth("python") == {}  # Docker Hub too, unless named
    monkeypatch.setenv(registries.REGISTRY_AUTH_ENV, "docker.io, private.example:5000")
    assert client.pull_auth("private.example:5000/secret/image") is None  # docker-py finds them
    assert client.pull_auth("library/python") is None
    assert client.pull_auth("other.example/x") == {}
