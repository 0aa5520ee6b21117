"""The engine client: docker-py's low-level APIClient, the one thing that speaks to Docker.

Everything docker-py reaches works: `DOCKER_HOST` as unix://, tcp:// (with TLS and client
certificates from `DOCKER_TLS_VERIFY` / `DOCKER_CERT_PATH`) or ssh:// (docker-py's SSH
adapter over the ssh binary and its config; docker-py imports paramiko for it, so it needs
`pip install 'orchestra[ssh]'`), the
current Docker context when no `DOCKER_HOST` is set, registry credentials from
`DOCKER_CONFIG`/`~/.docker/config.json` and its credential helpers, and Podman's
Docker-compatible socket. Credentials go only to the registries the user names
(`ORCHESTRA_REGISTRY_AUTH`, comma-separated hosts; `orchestra run --registry-auth HOST`):
a dataset picks its FROM references, and a build or pull of one on any other registry is
sent none (docker-py would send a build every credential the config holds). The connection pool is sized to the job's concurrency.

`EngineClient` keeps the few calls DockerRuntime makes in one place, in orchestra's terms
where docker-py's differ (a network made on a given subnet, a container from an API
config, a tar stream that can be closed early, an attached exec's raw socket with the bytes
that came with the engine's answer), and counts its requests (bench/run.py prints them).

Errors are docker-py's: `APIError` (an HTTP error; `NotFound`, `ImageNotFound`) and
`DockerException` for a client that cannot be made; a broken connection is an OSError
(requests' errors are). DockerRuntime turns them into orchestra's fault types at the seam.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import socket
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from orchestrator.runtime.registries import registry_host, trusted_registries
from orchestrator.util import JsonObject

if TYPE_CHECKING:
    from requests import Response


def _may_need_ssh() -> bool:
    """DOCKER_HOST is ssh://, or a Docker context (which may be ssh) is chosen."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"].startswith("ssh://")
    if os.environ.get("DOCKER_CONTEXT", "default") != "default":
        return True
    config = os.path.join(os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker"), "config.json")
    try:
        with open(config) as handle:
            return json.load(handle).get("currentContext", "default") not in ("", "default")
    except (OSError, ValueError, AttributeError):
        return False


# Two packages docker-py's import would load for nothing are hidden while it loads, and
# visible again after (python -X importtime, this machine):
# - paramiko (0.2-0.3 s), for ssh:// alone: hidden where the engine cannot be ssh (docker-py
#   then has no SSH adapter, as without paramiko);
# - requests' character detection (charset_normalizer, or chardet: 13 ms), which guesses the
#   encoding of a text answer that declares none. The engine answers JSON and byte streams;
#   without it requests takes such text as UTF-8 (its documented fallback).
_HIDDEN = [] if "requests" in sys.modules else [
    name for name in ("charset_normalizer", "chardet") if name not in sys.modules]
if "paramiko" not in sys.modules and "docker" not in sys.modules and not _may_need_ssh():
    _HIDDEN.append("paramiko")
if _HIDDEN:
    import warnings

    for _name in _HIDDEN:
        sys.modules[_name] = None  # type: ignore[assignment]
    try:
        with warnings.catch_warnings():  # requests warns that it has no character detection
            warnings.simplefilter("ignore")
            import docker
    finally:
        for _name in _HIDDEN:
            del sys.modules[_name]
import docker  # noqa: E402
import urllib3  # noqa: E402
from docker.errors import APIError, DockerException, ImageNotFound, NotFound  # noqa: E402
from docker.types import IPAMConfig, IPAMPool  # noqa: E402

__all__ = ["APIError", "BROKEN_STREAM", "DockerException", "EngineClient", "ImageNotFound",
           "NotFound", "TRANSPORT_ERRORS"]

# A broken connection to the engine: requests' errors are OSErrors; urllib3's (a streamed
# body cut mid-chunk: ProtocolError, IncompleteRead) are not, and are BROKEN_STREAM.
# docker-py's APIError is an OSError too: callers catch it first.
BROKEN_STREAM: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError,)
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (OSError, *BROKEN_STREAM)

API_VERSION = "1.41"  # Docker 20.10; newer engines serve it too
CHUNK = 1024 * 1024


def _client_kwargs() -> JsonObject:
    """Where the engine is: DOCKER_HOST (and its TLS variables), else the current Docker
    context, else the local socket."""
    kwargs = docker.utils.kwargs_from_env()
    if "base_url" not in kwargs and not os.environ.get("DOCKER_HOST"):
        try:
            from docker.context import ContextAPI

            context = ContextAPI.get_current_context()
        except Exception:  # no readable context: the default socket
            context = None
        if context is not None and context.Host and context.name != "default":
            kwargs["base_url"] = context.Host
            tls = context.TLSConfig
            if tls:
                kwargs["tls"] = tls
    if str(kwargs.get("base_url", "")).startswith("ssh://"):
        kwargs["use_ssh_client"] = True  # the ssh binary and its config (docker-py still imports paramiko)
    return kwargs


def pull_auth(repository: str) -> dict[str, str] | None:
    """What a pull of `repository` sends: the config's credentials (None: docker-py finds
    them) for a trusted registry, none ({}) for any other."""
    registry, _ = docker.auth.resolve_repository_name(repository)
    return None if registry_host(registry) in trusted_registries() else {}


class _Counted(docker.APIClient):
    calls = 0

    def request(self, method: str, url: str, *args: object,
                **kwargs: object) -> Response:  # every engine request passes here
        self.calls += 1
        return super().request(method, url, *args, **kwargs)

    def _set_auth_headers(self, headers: dict[str, str]) -> None:
        """A build's credentials: only the trusted registries' (docker-py sends them all)."""
        super()._set_auth_headers(headers)
        if "X-Registry-Config" not in headers:
            return
        every = json.loads(base64.urlsafe_b64decode(headers.pop("X-Registry-Config")))
        trusted = trusted_registries()
        kept = {name: creds for name, creds in every.items() if registry_host(name) in trusted}
        if kept:
            headers["X-Registry-Config"] = docker.auth.encode_header(kept).decode()


class TarStream:
    """A streamed response body (a container's files). Read to its end, its connection goes
    back to the pool; closed early, the connection is closed (the engine stops sending)."""

    def __init__(self, response: Response):
        self.response = response

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.response.raw.stream(CHUNK, decode_content=False)
        finally:
            self.response.close()

    def close(self) -> None:
        self.response.close()


class Hijacked:
    """An attached exec's socket: stdin in, multiplexed stdout/stderr frames out. Holds the
    HTTP response, whose collection would close the socket under TLS."""

    def __init__(self, sock: socket.socket, response: Response):
        self.sock, self.response = sock, response

    def settimeout(self, seconds: float) -> None:
        self.sock.settimeout(seconds)

    def recv(self, n: int) -> bytes:
        return self.sock.recv(n)

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def shutdown(self, how: int) -> None:
        try:
            self.sock.shutdown(how)
        except (OSError, AttributeError, NotImplementedError):
            pass  # an ssh channel: stdin simply ends when we stop sending

    def close(self) -> None:
        """Never fails: the exec's stream is over. Over ssh:// the tunnel's ssh process may
        have exited with it, and closing then flushes a dead pipe (BrokenPipeError, seen in
        `make test`: it turned a finished exec into the trial's infra_error)."""
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            self.response.close()


class EngineClient:
    """One engine; thread-safe (requests' pool gives each request a connection of its own)."""

    def __init__(self, timeout: float = 120, max_pool_size: int = 16, **overrides: object):
        kwargs = {**_client_kwargs(), **overrides}
        self.api = _Counted(version=API_VERSION, timeout=timeout, max_pool_size=max_pool_size,
                            **kwargs)
        # The engine is addressed exactly: no proxy variables, and DOCKER_CERT_PATH's CA is
        # the one that verifies it (requests would let REQUESTS_CA_BUNDLE, set on machines
        # with an intercepting proxy, replace it: measured, verification then fails).
        self.api.trust_env = False
        self.base_url = str(kwargs.get("base_url") or "unix:///var/run/docker.sock")
        self.timeout, self.max_pool_size = timeout, max_pool_size
        # One round trip proves the engine answers and says which engine it is: Podman's
        # compatible API adds Libpod-* headers to /_ping (/version tells too, at 8x the cost:
        # 5.7 ms against 0.7 on this machine's dockerd).
        ping = self._ping()
        self.server = ping.headers.get("Server", "")  # "Docker/20.10.24 (linux)", "Libpod/4.3.1 (linux)"
        self.podman = "Libpod-Api-Version" in ping.headers
        self.api_version = self.api.api_version

    @property
    def calls(self) -> int:
        return self.api.calls

    def close(self) -> None:
        self.api.close()

    # ---- system, images ----------------------------------------------------------------
    def ping(self, timeout: float | None = None) -> bool:
        """The engine's /_ping, within `timeout` seconds (default: the client's)."""
        return self._ping(timeout).text == "OK"

    def _ping(self, timeout: float | None = None) -> Response:
        api = self.api
        response = api._get(api._url("/_ping"), timeout=timeout or self.timeout)
        api._raise_for_status(response)
        return response

    def info(self) -> JsonObject:
        return self.api.info()

    def inspect_image(self, ref: str) -> JsonObject:
        return self.api.inspect_image(ref)

    def images(self, filters: JsonObject | None = None, all_images: bool = False) -> list[JsonObject]:
        """The engine's image list; `all_images`: a build's intermediate steps too."""
        return self.api.images(filters=filters, all=all_images)

    def tag(self, image: str, repository: str, tag: str) -> bool:
        return bool(self.api.tag(image, repository, tag))

    def push(self, repository: str, tag: str) -> Iterator[JsonObject]:
        """Credentials come from the Docker config, as for a pull."""
        return self.api.push(repository, tag=tag, stream=True, decode=True)

    def remove_image(self, ref: str, force: bool = False) -> None:
        self.api.remove_image(ref, force=force)

    def login(self, registry: str) -> bool:
        """The engine checks the Docker config's credentials for `registry` against it
        (raising APIError when refused); False when the config holds none."""
        found = docker.auth.resolve_authconfig(docker.auth.load_config(), registry)
        if not found or not found.get("username"):
            return False
        self.api.login(found["username"], found.get("password"), registry=registry, reauth=True)
        return True

    def commit(self, container: str, repository: str, tag: str, conf: JsonObject | None = None) -> JsonObject:
        return self.api.commit(container, repository=repository, tag=tag, conf=conf or {})

    def build(self, context: bytes | BinaryIO, tag: str, labels: dict[str, str], timeout: float,
              rm: bool = True, forcerm: bool = True, pull: bool = False,
              network_mode: str | None = None) -> Iterator[JsonObject]:
        """A build from a tar context: the engine's progress objects as they come; its RUN
        steps on `network_mode` (None: the engine's default bridge)."""
        return self.api.build(fileobj=io.BytesIO(context) if isinstance(context, bytes) else context,
                              custom_context=True, tag=tag,
                              labels=labels, rm=rm, forcerm=forcerm, pull=pull, timeout=timeout,
                              decode=True, network_mode=network_mode)

    def pull(self, repository: str, tag: str) -> Iterator[JsonObject]:
        """Credentials for the image's registry come from the Docker config (and its
        credential helpers), read by docker-py on every pull, for a registry the user
        trusts only (pull_auth)."""
        return self.api.pull(repository, tag=tag, stream=True, decode=True, auth_config=pull_auth(repository))

    def import_image_from_file(self, filename: str, repository: str, tag: str,
                               changes: list[str] | None = None) -> None:
        answer = str(self.api.import_image_from_file(filename, repository=repository, tag=tag,
                                                     changes=list(changes or [])))
        if '"error"' in answer:
            raise APIError(f"import of {filename} failed: {answer[-500:]}")
        # Podman 4.3 ignores `tag` on an import (the image lands as :latest): tagged here by
        # the id the engine answered with (a no-op on Docker, which tagged it already)
        image_id = None
        for line in answer.splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            found = item.get("id") or item.get("status") if isinstance(item, dict) else None
            if isinstance(found, str) and found.startswith("sha256:"):
                image_id = found
        if image_id is not None:
            self.api.tag(image_id, repository, tag)

    # ---- networks and volumes ------------------------------------------------------------
    def networks(self, filters: JsonObject | None = None) -> list[JsonObject]:
        return self.api.networks(filters=filters)

    def inspect_network(self, name: str) -> JsonObject:
        return self.api.inspect_network(name)

    def create_network(self, name: str, internal: bool, labels: dict[str, str],
                       subnet: str, gateway: str, options: dict[str, str]) -> JsonObject:
        ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=subnet, gateway=gateway)])
        return self.api.create_network(name, driver="bridge", options=options, ipam=ipam,
                                       internal=internal, labels=labels, check_duplicate=True)

    def remove_network(self, name: str) -> None:
        self.api.remove_network(name)

    def connect_container_to_network(self, container: str, network: str) -> None:
        self.api.connect_container_to_network(container, network)

    def disconnect_container_from_network(self, container: str, network: str,
                                          force: bool = False) -> None:
        self.api.disconnect_container_from_network(container, network, force=force)

    def volumes(self, filters: JsonObject | None = None) -> JsonObject:
        return self.api.volumes(filters=filters) or {}

    def inspect_volume(self, name: str) -> JsonObject:
        return self.api.inspect_volume(name)

    def create_volume(self, name: str, driver: str = "local", labels: JsonObject | None = None,
                      driver_opts: JsonObject | None = None) -> JsonObject:
        return self.api.create_volume(name, driver=driver, driver_opts=driver_opts or {},
                                      labels=labels or {})

    def remove_volume(self, name: str, force: bool = False) -> None:
        self.api.remove_volume(name, force=force)

    # ---- containers --------------------------------------------------------------------
    def containers(self, all: bool = False, filters: JsonObject | None = None,
                   size: bool = False) -> list[JsonObject]:
        return self.api.containers(all=all, filters=filters, size=size)

    def inspect_container(self, container: str) -> JsonObject:
        return self.api.inspect_container(container)

    def create_container(self, image: str, command: list[str] | None = None,
                         name: str | None = None, host_config: JsonObject | None = None,
                         **config: object) -> JsonObject:
        """A container from the API's own fields (Labels, Env as "K=V", WorkingDir, User,
        Entrypoint, Healthcheck, NetworkingConfig), nothing pulled."""
        body = {"Image": image, "Cmd": command, "HostConfig": host_config or {},
                "AttachStdin": False, "AttachStdout": False, "AttachStderr": False,
                "Tty": False, "OpenStdin": False, "StdinOnce": False, **config}
        try:
            return self.api.create_container_from_config(body, name=name)
        except NotFound as exc:
            raise ImageNotFound(str(exc), response=exc.response, explanation=exc.explanation) from exc

    def start(self, container: str) -> None:
        self.api.start(container)

    def kill(self, container: str) -> None:
        self.api.kill(container)

    def wait(self, container: str, timeout: float) -> JsonObject:
        """Raises an OSError (a read timeout) when the container outlives `timeout`."""
        return self.api.wait(container, timeout=timeout)

    def remove_container(self, container: str, force: bool = False, v: bool = False) -> None:
        self.api.remove_container(container, force=force, v=v)

    def put_archive(self, container: str, path: str, data: bytes | BinaryIO) -> bool:
        return bool(self.api.put_archive(container, path, data))

    def get_archive(self, container: str, path: str) -> TarStream | None:
        """A tar stream of `path` (close it when not read to the end), None if absent."""
        # identity: requests asks for gzip, and the engine would compress the tar for us to
        # inflate (CPU on both sides, for a stream read once)
        response = self.api._get(self.api._url("/containers/{0}/archive", container),
                                 params={"path": path}, stream=True,
                                 headers={"Accept-Encoding": "identity"})
        if response.status_code == 404:
            response.close()
            return None
        try:
            self.api._raise_for_status(response)
        except APIError:
            response.close()
            raise
        return TarStream(response)

    # ---- exec ----------------------------------------------------------------------------
    def exec_create(self, container: str, cmd: list[str], environment: dict[str, str] | None = None,
                    workdir: str | None = None, user: str = "", stdin: bool = False) -> JsonObject:
        return self.api.exec_create(container, cmd, stdout=True, stderr=True, stdin=stdin,
                                    tty=False, user=user, environment=environment or {},
                                    workdir=workdir or None)

    def exec_start(self, exec_id: str) -> None:
        """Start detached: the process runs on; exec_inspect says when it ended."""
        self.api.exec_start(exec_id, detach=True)

    def exec_attach(self, exec_id: str) -> tuple[Hijacked, bytes]:
        """Start attached: the raw socket and the bytes of the stream that arrived with the
        engine's answer (read into the HTTP layer's buffer, which a raw read would skip)."""
        response = self.api._post_json(self.api._url("/exec/{0}/start", exec_id),
                                       headers={"Connection": "Upgrade", "Upgrade": "tcp"},
                                       data={"Tty": False, "Detach": False}, stream=True)
        try:
            sock = self.api._get_raw_response_socket(response)
            sock = getattr(sock, "_sock", sock)  # SocketIO (unix, tcp) -> its socket
            if self.base_url.startswith("ssh://"):  # a pipe to ssh: nothing is read ahead
                return Hijacked(sock, response), b""
            return Hijacked(sock, response), _buffered(response, sock)
        except BaseException:
            response.close()
            raise

    def exec_inspect(self, exec_id: str) -> JsonObject:
        return self.api.exec_inspect(exec_id)


def _buffered(response: Response, sock: socket.socket) -> bytes:
    """Whatever the HTTP layer read past the engine's 101 answer (the first output of a
    fast process may come in the same packet), taken without blocking."""
    reader = getattr(getattr(response.raw, "_fp", None), "fp", None)
    if reader is None or not hasattr(reader, "read1") or not hasattr(sock, "setblocking"):
        return b""
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        return reader.read1(65536) or b""
    except (OSError, ValueError):
        return b""  # nothing buffered and nothing on the socket yet
    finally:
        sock.settimeout(timeout)
