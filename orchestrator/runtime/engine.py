"""A small Docker Engine API client: the calls DockerRuntime makes, over the engine's socket.

docker-py, with requests and urllib3 under it, cost every run 55-90 ms of start-up to import
and a few hundred microseconds of Python per call (a trial makes ~25). The Engine API is
HTTP/1.1 with JSON, so this speaks it with the standard library: a pool of keep-alive
connections, JSON in and out, streamed bodies (build, pull, import, archives) and the
hijacked socket of an attached exec. Method names and arguments follow docker-py's
low-level APIClient for the subset used, so tests can read state back the same way.

Errors: an engine answer >= 400 is APIError (NotFound for 404, ImageNotFound when the
missing object is an image); a broken connection is an OSError (http.client's protocol
errors, e.g. a body cut mid-chunk, are raised as ConnectionError). A request on a pooled connection the engine has meanwhile closed is sent
again once on a fresh one (nothing was processed: the engine closes idle connections only).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO
from urllib.parse import quote, urlencode, urlsplit

API_VERSION = "1.41"  # Docker 20.10; newer engines serve it too
DEFAULT_SOCKET = "/var/run/docker.sock"
CHUNK = 1024 * 1024


class APIError(Exception):
    """The engine answered with an error status."""

    def __init__(self, status: int, message: str, path: str = ""):
        super().__init__(f"{status} {message}" + (f" ({path})" if path else ""))
        self.status_code, self.explanation = status, message


class NotFound(APIError):
    pass


class ImageNotFound(NotFound):
    pass


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


_STALE = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


class Engine:
    """One engine; thread-safe (each request takes a pooled connection of its own)."""

    def __init__(self, base_url: str | None = None, timeout: float = 120, max_pool_size: int = 16):
        url = base_url or os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
        if os.environ.get("DOCKER_TLS_VERIFY"):
            raise OSError("DOCKER_TLS_VERIFY is set: orchestra talks to a local engine over its "
                          "unix socket (or plain tcp), not TLS")
        parts = urlsplit(url)
        if parts.scheme == "unix":
            self._socket_path, self._address = parts.path or DEFAULT_SOCKET, None
        elif parts.scheme in ("tcp", "http"):
            self._socket_path, self._address = None, (parts.hostname or "localhost", parts.port or 2375)
        else:
            raise OSError(f"DOCKER_HOST={url}: only unix:// and tcp:// engines are supported")
        self.base_url, self.timeout, self.max_pool_size = url, timeout, max_pool_size
        self.api_version = API_VERSION
        self.calls = 0  # requests made (bench/run.py prints them per trial)
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        server = self._json("GET", "/version", versioned=False)
        self.api_version = min((server.get("ApiVersion", API_VERSION), API_VERSION),
                               key=lambda v: tuple(int(x) for x in v.split(".")))

    # ---- plumbing -----------------------------------------------------------------
    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._socket_path is not None:
            return _UnixConnection(self._socket_path, timeout)
        host, port = self._address  # type: ignore[misc]
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._connection(self.timeout), False

    def _give(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        """Back to the pool, the response having been read to its end."""
        response.close()  # marks it done for http.client (the socket stays open)
        if response.will_close:
            conn.close()
            return
        with self._lock:
            if len(self._idle) < self.max_pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def _url(self, path: str, params: dict | None, versioned: bool = True) -> str:
        query = ""
        if params:
            pairs = []
            for key, value in params.items():
                if value is None:
                    continue
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, bool):
                        item = "1" if item else "0"
                    elif isinstance(item, dict) and key == "filters":  # {name: [values]}
                        item = json.dumps({k: v if isinstance(v, list) else [v]
                                           for k, v in item.items()})
                    elif isinstance(item, dict):
                        item = json.dumps(item)
                    pairs.append((key, str(item)))
            query = "?" + urlencode(pairs) if pairs else ""
        return (f"/v{self.api_version}" if versioned else "") + path + query

    def request(self, method: str, path: str, params: dict | None = None, body=None,
                headers: dict[str, str] | None = None, stream: bool = False,
                timeout: float | None = None, versioned: bool = True):
        """One request: (status, body bytes), or (status, _Stream) with `stream`."""
        url = self._url(path, params, versioned)
        headers = dict(headers or {})
        if isinstance(body, (dict, list)):
            body, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        for attempt in (0, 1):
            conn, reused = self._take()
            try:
                with _or_close(conn):
                    if conn.sock is not None:
                        conn.sock.settimeout(timeout if timeout is not None else self.timeout)
                    else:
                        conn.timeout = timeout if timeout is not None else self.timeout
                    conn.request(method, url, body=body, headers=headers)
                    response = conn.getresponse()
            except _STALE:
                if reused and attempt == 0 and not hasattr(body, "read"):
                    continue
                raise
            with self._lock:
                self.calls += 1
            if stream and response.status < 400:
                return response.status, _Stream(self, conn, response)
            with _or_close(conn):
                data = response.read()
            self._give(conn, response)
            if response.status >= 400:
                raise _error(response.status, data, path)
            return response.status, data
        raise AssertionError("unreachable")

    def _json(self, method: str, path: str, params: dict | None = None, body=None,
              timeout: float | None = None, versioned: bool = True):
        _, data = self.request(method, path, params, body, timeout=timeout, versioned=versioned)
        return json.loads(data) if data.strip() else None

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # ---- system -------------------------------------------------------------------
    def ping(self) -> bool:
        return self.request("GET", "/_ping", versioned=False)[1] == b"OK"

    def info(self) -> dict:
        return self._json("GET", "/info")

    # ---- images -------------------------------------------------------------------
    def inspect_image(self, ref: str) -> dict:
        return self._json("GET", f"/images/{ref}/json")

    def images(self, filters: dict | None = None) -> list[dict]:
        return self._json("GET", "/images/json", {"filters": filters})

    def tag(self, image: str, repository: str, tag: str) -> bool:
        self.request("POST", f"/images/{image}/tag", {"repo": repository, "tag": tag})
        return True

    def remove_image(self, ref: str, force: bool = False) -> None:
        self.request("DELETE", f"/images/{ref}", {"force": force})

    def commit(self, container: str, repository: str, tag: str, conf: dict | None = None) -> dict:
        return self._json("POST", "/commit", {"container": container, "repo": repository,
                                              "tag": tag}, conf or {})

    def build(self, context: bytes, tag: str, labels: dict[str, str], timeout: float,
              rm: bool = True, forcerm: bool = True, pull: bool = False) -> Iterator[dict]:
        """POST /build with a tar context: the engine's progress objects as they come."""
        _, stream = self.request(
            "POST", "/build", {"t": tag, "labels": labels, "rm": rm, "forcerm": forcerm,
                               "pull": pull},
            body=context, headers={"Content-Type": "application/x-tar"}, stream=True,
            timeout=timeout)
        return stream.objects()

    def pull(self, repository: str, tag: str) -> Iterator[dict]:
        _, stream = self.request("POST", "/images/create", {"fromImage": repository, "tag": tag},
                                 stream=True)
        return stream.objects()

    def import_image_from_file(self, filename: str, repository: str, tag: str,
                               changes: list[str] | None = None) -> None:
        with open(filename, "rb") as handle:
            _, stream = self.request(
                "POST", "/images/create", {"fromSrc": "-", "repo": repository, "tag": tag,
                                           "changes": list(changes or [])},
                body=handle, headers={"Content-Type": "application/tar",
                                      "Content-Length": str(os.fstat(handle.fileno()).st_size)},
                stream=True, timeout=max(self.timeout, 600))
            for item in stream.objects():
                if "error" in item:
                    raise APIError(500, str(item["error"]), "/images/create")

    # ---- networks and volumes -------------------------------------------------------
    def networks(self, filters: dict | None = None) -> list[dict]:
        return self._json("GET", "/networks", {"filters": filters})

    def inspect_network(self, name: str) -> dict:
        return self._json("GET", f"/networks/{name}")

    def create_network(self, name: str, internal: bool, labels: dict[str, str],
                       subnet: str, gateway: str, options: dict[str, str]) -> dict:
        return self._json("POST", "/networks/create", body={
            "Name": name, "CheckDuplicate": True, "Driver": "bridge", "Internal": internal,
            "Labels": labels, "Options": options,
            "IPAM": {"Driver": "default", "Config": [{"Subnet": subnet, "Gateway": gateway}]}})

    def remove_network(self, name: str) -> None:
        self.request("DELETE", f"/networks/{name}")

    def connect_container_to_network(self, container: str, network: str) -> None:
        self.request("POST", f"/networks/{network}/connect", body={"Container": container})

    def disconnect_container_from_network(self, container: str, network: str,
                                          force: bool = False) -> None:
        self.request("POST", f"/networks/{network}/disconnect",
                     body={"Container": container, "Force": force})

    def volumes(self, filters: dict | None = None) -> dict:
        return self._json("GET", "/volumes", {"filters": filters})

    def inspect_volume(self, name: str) -> dict:
        return self._json("GET", f"/volumes/{name}")

    def create_volume(self, name: str, driver: str = "local", labels: dict | None = None,
                      driver_opts: dict | None = None) -> dict:
        return self._json("POST", "/volumes/create", body={
            "Name": name, "Driver": driver, "Labels": labels or {}, "DriverOpts": driver_opts or {}})

    def remove_volume(self, name: str, force: bool = False) -> None:
        self.request("DELETE", f"/volumes/{name}", {"force": force})

    # ---- containers -----------------------------------------------------------------
    def containers(self, all: bool = False, filters: dict | None = None,
                   size: bool = False) -> list[dict]:
        return self._json("GET", "/containers/json", {"all": all, "filters": filters, "size": size})

    def inspect_container(self, container: str) -> dict:
        return self._json("GET", f"/containers/{container}/json")

    def create_container(self, image: str, command: list[str] | None = None,
                         name: str | None = None, host_config: dict | None = None,
                         **config) -> dict:
        """POST /containers/create. `config`: more of the API's container fields by their
        API names (Labels, Env as "K=V", WorkingDir, User, Entrypoint, Healthcheck,
        NetworkingConfig)."""
        body = {"Image": image, "Cmd": command, "HostConfig": host_config or {},
                "AttachStdin": False, "AttachStdout": False, "AttachStderr": False,
                "Tty": False, "OpenStdin": False, "StdinOnce": False, **config}
        try:
            return self._json("POST", "/containers/create", {"name": name}, body)
        except NotFound as exc:
            raise ImageNotFound(404, exc.explanation, "/containers/create") from exc

    def start(self, container: str) -> None:
        self.request("POST", f"/containers/{container}/start")

    def kill(self, container: str) -> None:
        self.request("POST", f"/containers/{container}/kill")

    def wait(self, container: str, timeout: float) -> dict:
        """Raises TimeoutError when the container outlives `timeout`."""
        return self._json("POST", f"/containers/{container}/wait", timeout=timeout)

    def remove_container(self, container: str, force: bool = False, v: bool = False) -> None:
        self.request("DELETE", f"/containers/{container}", {"force": force, "v": v})

    def put_archive(self, container: str, path: str, data: bytes | BinaryIO) -> bool:
        headers = {"Content-Type": "application/x-tar"}
        if hasattr(data, "fileno"):
            headers["Content-Length"] = str(os.fstat(data.fileno()).st_size - data.tell())
        status, _ = self.request("PUT", f"/containers/{container}/archive", {"path": path},
                                 body=data, headers=headers)
        return status == 200

    def get_archive(self, container: str, path: str) -> _Stream | None:
        """A tar stream of `path` (close it when not read to the end), None if absent."""
        try:
            _, stream = self.request("GET", f"/containers/{container}/archive", {"path": path},
                                     stream=True)
        except NotFound:
            return None
        return stream

    # ---- exec -----------------------------------------------------------------------
    def exec_create(self, container: str, cmd: list[str], environment: dict[str, str] | None = None,
                    workdir: str | None = None, user: str = "", stdin: bool = False) -> dict:
        body = {"AttachStdin": stdin, "AttachStdout": True, "AttachStderr": True, "Tty": False,
                "Cmd": cmd, "Env": [f"{k}={v}" for k, v in (environment or {}).items()],
                "User": user}
        if workdir:
            body["WorkingDir"] = workdir
        return self._json("POST", f"/containers/{container}/exec", body=body)

    def exec_start(self, exec_id: str) -> None:
        """Start detached: the process runs on; exec_inspect says when it ended."""
        self.request("POST", f"/exec/{exec_id}/start", body={"Detach": True, "Tty": False})

    def exec_attach(self, exec_id: str) -> tuple[socket.socket, bytes]:
        """Start attached: the raw socket (stdin in, multiplexed stdout/stderr frames out)
        and the bytes of the stream that arrived with the engine's answer."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) if self._socket_path else \
            socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._socket_path or self._address)
            body = json.dumps({"Detach": False, "Tty": False}).encode()
            sock.sendall((f"POST {self._url(f'/exec/{quote(exec_id)}/start', None)} HTTP/1.1\r\n"
                          "Host: docker\r\nContent-Type: application/json\r\n"
                          "Connection: Upgrade\r\nUpgrade: tcp\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionResetError("the engine closed the exec stream before answering")
                received += chunk
            head, _, rest = received.partition(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            if status >= 400:
                raise _error(status, rest, f"/exec/{exec_id}/start")
        except BaseException:
            sock.close()
            raise
        with self._lock:
            self.calls += 1
        return sock, rest

    def exec_inspect(self, exec_id: str) -> dict:
        return self._json("GET", f"/exec/{exec_id}/json")


class _Stream:
    """A streamed response body. Read to its end, its connection goes back to the pool;
    closed early, the connection is closed (the engine then stops sending)."""

    def __init__(self, engine: Engine, conn: http.client.HTTPConnection,
                 response: http.client.HTTPResponse):
        self.engine, self.conn, self.response = engine, conn, response
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        with _or_close(self.conn):  # e.g. the body cut mid-chunk, or the reader gave up
            while chunk := self.response.read1(CHUNK):
                yield chunk
        if not self.closed:
            self.closed = True
            self.engine._give(self.conn, self.response)

    def objects(self) -> Iterator[dict]:
        """The body as a sequence of JSON objects (build, pull and import progress)."""
        decoder, buffer = json.JSONDecoder(), ""
        for chunk in self:
            buffer += chunk.decode(errors="replace")
            while True:
                buffer = buffer.lstrip()
                if not buffer:
                    break
                try:
                    item, end = decoder.raw_decode(buffer)
                except json.JSONDecodeError:
                    break  # the rest of this object is in the next chunk
                buffer = buffer[end:]
                if isinstance(item, dict):
                    yield item

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.conn.close()


@contextmanager
def _or_close(conn: http.client.HTTPConnection) -> Iterator[None]:
    """Close `conn` when anything raises (it is in an unknown state); http.client's protocol
    errors, which are not OSErrors (e.g. IncompleteRead), become ConnectionError."""
    try:
        yield
    except OSError:
        conn.close()
        raise
    except http.client.HTTPException as exc:
        conn.close()
        raise ConnectionError(f"engine connection: {exc.__class__.__name__}: {exc}") from exc
    except BaseException:
        conn.close()
        raise


def _error(status: int, data: bytes, path: str) -> APIError:
    try:
        message = json.loads(data).get("message", "")
    except (ValueError, AttributeError):
        message = data.decode(errors="replace").strip()
    message = message or http.client.responses.get(status, "")
    if status == 404:
        image = path.startswith("/images/") or "no such image" in message.lower()
        return (ImageNotFound if image else NotFound)(status, message, path)
    return APIError(status, message, path)
