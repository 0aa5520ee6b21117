"""`orchestra view`: a local web app over job folders (127.0.0.1 only, stdlib HTTP).

Routes: `/` jobs, `/job/<name>` one job's trials (filter, sort, pages of 100),
`/job/<name>/trial/<folder>` one trial, `/file/<job>/<path>` a file of a job, paged.
Only files under the given job folders are served: every path is resolved and checked
against its job folder, so `../` (encoded or not) and links out are refused with 404.

Only requests whose `Host` names the address it listens on are answered (127.0.0.1:PORT,
localhost:PORT, [::1]:PORT or the bound host, with its port): a page on another origin
that rebinds its DNS name to 127.0.0.1 sends its own name, and is answered 421 with
nothing of any job.
"""

from __future__ import annotations

import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from orchestrator.paths import JobDir, TrialDir
from orchestrator.view import pages
from orchestrator.view.compare_page import compare_page


def _find_jobs(roots: list[Path]) -> dict[str, Path]:
    """Job folders (they hold result.json or config.json) at or one level under each root."""
    jobs: dict[str, Path] = {}
    for root in roots:
        root = root.resolve()
        candidates = [root] if JobDir(root).config.is_file() else sorted(
            p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        for folder in candidates:
            if JobDir(folder).result.is_file() or JobDir(folder).config.is_file():
                jobs.setdefault(folder.name, folder.resolve())
    return jobs


class ViewServer:
    def __init__(self, roots: list[Path], host: str = "127.0.0.1", port: int = 0):
        self.roots = roots
        viewer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if viewer.host_allowed(self.headers.get_all("Host") or []):
                    status, body = viewer.route(self.path)
                else:  # DNS rebinding: another site's name pointed at this address
                    status, body = 421, pages.page("misdirected", "<p>this viewer answers only "
                                                   "requests addressed to it by its own address</p>")
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        assert isinstance(host, str)  # a TCP server's address: (host, port)
        return f"http://{host}:{port}/"

    def allowed_hosts(self) -> set[str]:
        """The Host values that name this server: its loopback names and the bound host,
        each with the port (and bare, on port 80)."""
        host, port = self.httpd.server_address[:2]
        assert isinstance(host, str)  # a TCP server's address: (host, port)
        names = {"127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host}
        allowed = {f"{name}:{port}" for name in names}
        return allowed | (names if port == 80 else set())

    def host_allowed(self, values: list[str]) -> bool:
        """Exactly one Host header, naming this server (case-insensitive, a trailing dot
        of a fully qualified name is not accepted either)."""
        return len(values) == 1 and values[0].strip().lower() in self.allowed_hosts()

    def start(self) -> ViewServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def route(self, raw: str) -> tuple[int, str]:
        url = urllib.parse.urlsplit(raw)
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        jobs = _find_jobs(self.roots)
        try:
            if not parts:
                return 200, pages.jobs_page(jobs, params.get("q", ""))
            if parts == ["compare"]:
                return compare_page(jobs, params.get("a", ""), params.get("b", ""))
            if parts[0] == "job" and len(parts) >= 2 and parts[1] in jobs:
                folder = jobs[parts[1]]
                if len(parts) == 2:
                    job = pages.load_job(folder)
                    if job is not None:
                        return 200, pages.job_page(parts[1], folder, job, params)
                    running = pages.running_job(folder)  # no result.json yet: the trials so far
                    if running is None:
                        return 404, pages.page("not found", "<p>this job has no result.json and no "
                                                            "readable config.json</p>")
                    return 200, pages.job_page(parts[1], folder, running[0], params, banner=running[1])
                if len(parts) == 4 and parts[2] == "trial":
                    trial = self._inside(folder, f"{JobDir(Path()).trials.as_posix()}/{parts[3]}")
                    if trial is not None and TrialDir(trial).result.is_file():
                        return 200, pages.trial_page(parts[1], trial)
            if parts[0] == "file" and len(parts) >= 3 and parts[1] in jobs:
                path = self._inside(jobs[parts[1]], "/".join(parts[2:]))
                if path is not None and path.is_file():
                    return 200, pages.file_page("/".join(parts[1:]), path,
                                                int(params.get("offset", "0") or 0))
        except (ValueError, OSError) as exc:
            return 500, pages.page("error", f"<p>{pages.esc(exc)}</p>")
        return 404, pages.page("not found", "<p>nothing here (only files under the job folders "
                                            "are served)</p>")

    @staticmethod
    def _inside(root: Path, relative: str) -> Path | None:
        if "\x00" in relative:
            return None
        candidate = (root / relative).resolve()
        return candidate if candidate == root or root in candidate.parents else None
