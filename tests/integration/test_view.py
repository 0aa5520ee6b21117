"""`orchestra view` in a real headless Chromium, on job folders made by real runs: the
failure reason, a tool call, a threaded reply and the verifier output are on the page; an
agent-written <script> does not run; `../` is refused. Screenshots land in the pytest
temporary folder (printed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import ROOT, make_task

from orchestrator.view.pages import esc

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
SCRIPT = "<script>document.title='pwned'</script>"
# file names an agent may make (printf's escapes): a newline, URL syntax, a bidi override
ODD_NAMES = ["new\\nline.txt", "what?.txt", "hash#1.txt", "pct%%41.txt", "space name.txt",
             "\\342\\200\\256txt.exe"]

RELAY_SOLVE = f"""
    python3 - <<'PY'
    import json, subprocess
    def run(*a):
        return subprocess.run(a, capture_output=True, text=True, check=True).stdout
    me = json.loads(run("chan", "whoami"))["pubkey"]
    ask = [m for m in json.loads(run("chan", "read", "--json")) if me in m["mentioned_pubkeys"]][-1]
    run("chan", "reply", ask["id"], "The answer is 41, threaded under the question.")
    PY
    traj tool shell "echo 41 > /app/answer.txt" --output "{SCRIPT}"
    echo 41 > /app/answer.txt
    echo "{SCRIPT}"
"""
RELAY_TEST = """
    mkdir -p /logs/verifier
    found=$(cat /app/answer.txt)
    echo "expected 42, found $found"
    [ "$found" = 42 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
"""


def orchestra(*args):
    return subprocess.run([ORCHESTRA, *args], capture_output=True, text=True,
                          env={**os.environ}, timeout=600)


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    root = tmp_path_factory.mktemp("view")
    make_task(root / "ds", "wrong-answer", toml="[relay]\nenabled = true\n", solve=RELAY_SOLVE,
              test=RELAY_TEST)
    shutil.copytree(ROOT / "tasks/memorybench/mb-exact", root / "mb" / "mb-exact")
    assert orchestra("run", "--path", str(root / "ds"), "--agent", "oracle", "--jobs-dir",
                     str(root / "jobs"), "--job-name", "relay", "-q").returncode == 0
    assert orchestra("run", "--path", str(root / "mb"), "--agent", "oracle", "--policy", "memory-off",
                     "--jobs-dir", str(root / "jobs"), "--job-name", "mb-off", "-q").returncode == 0
    odd = "cd /logs/artifacts\n" + "".join(
        f"n=\"$(printf '{n}')\"; printf '%s' \"$n\" > \"$n\"\n" for n in ODD_NAMES)
    make_task(root / "odd", "odd-names", solve=odd + "touch /app/ok\n")
    assert orchestra("run", "--path", str(root / "odd"), "--agent", "oracle", "--jobs-dir",
                     str(root / "jobs"), "--job-name", "odd", "-q").returncode == 0
    # the demo's two arms (reference agent on replay) on one memorybench task: compare page
    arms = ["--path", str(root / "mb"), "--manifest", str(ROOT / "manifests/solo-replay.yaml"),
            "--jobs-dir", str(root / "jobs"), "-q"]
    assert orchestra("run", *arms, "--job-name", "ref-on").returncode == 0
    assert orchestra("run", *arms, "--job-name", "ref-off", "--policy", "memory-off").returncode == 0
    proc = subprocess.Popen([ORCHESTRA, "view", str(root / "jobs")], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    url = line.split("orchestra view: ")[1].split()[0]
    yield url, root
    proc.terminate()
    proc.wait(timeout=10)


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def browse(url: str, root: Path, shot: str) -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/ensure-test-tools.sh installs it)")
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              f"--user-data-dir={root / 'chrome'}", "--window-size=1200,1600"]
    subprocess.run(common + [f"--screenshot={root / shot}", url], capture_output=True, timeout=120)
    dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-500:]
    return dom.stdout


@pytest.mark.part("chromium")
def test_the_jobs_list_and_a_failing_relay_trial(viewer):
    url, root = viewer
    jobs = browse(url, root, "jobs.png")
    assert "relay" in jobs and "mb-off" in jobs
    job = browse(url + "job/relay?failed=1", root, "job.png")
    assert "wrong-answer" in job and "failed 1" in job
    folder = next((root / "jobs/relay/trials").iterdir()).name
    trial = browse(f"{url}job/relay/trial/{folder}", root, "trial-relay.png")
    assert "failure mode" in trial and "reward" in trial  # the reason comes first
    assert trial.index("failed") < trial.index("Trajectory")
    assert "expected 42, found 41" in trial  # the verifier output
    assert "echo 41 &gt; /app/answer.txt" in trial  # a tool call of the trajectory
    assert "The answer is 41, threaded under the question." in trial and "(reply)" in trial
    # the agent's <script> is text on the page, never code: the title is the page's own
    assert "<title>pwned</title>" not in trial and "&lt;script&gt;" in trial
    assert (root / "trial-relay.png").stat().st_size > 1000
    print(f"\nviewer screenshots: {root}")


def test_a_failing_memorybench_trial_shows_its_reason_and_tool_calls(viewer):
    url, root = viewer
    folder = next((root / "jobs/mb-off/trials").iterdir()).name
    trial = browse(f"{url}job/mb-off/trial/{folder}", root, "trial-mb.png")
    # memory-off: nothing recalled, so the oracle wrote an empty answer; reward 0
    assert "failure mode" in trial and trial.index("failed") < trial.index("Trajectory")
    assert "shell" in trial and "answer.txt" in trial and "Verifier output" in trial


def test_the_compare_page_draws_the_verdict_pairs_ci_and_memory_shadow(viewer):
    url, root = viewer
    jobs = browse(url, root, "jobs.png")
    assert "<form action=\"/compare\">" in jobs or "action=\"/compare\"" in jobs
    page = browse(url + "compare?a=ref-off&b=ref-on", root, "compare.png")
    # the arm that recalled is "on" whatever the order given; the verdict comes first
    assert "compare ref-on vs ref-off" in page
    assert "Memory helped on 1 of 1 paired trials and hurt on 0" in page
    assert "memorybench/mb-exact" in page and "helpful" in page
    assert 'class="ci"' in page and "95% CI" in page
    assert "Memory shadow" in page and "point-of-use markers (x/N)" in page and "1/1" in page
    assert page.index("Memory helped") < page.index("Pairs")
    job = browse(url + "job/ref-on", root, "job-shadow.png")
    assert "Memory shadow" in job and "100% (1/1)" in job
    folder = next((root / "jobs/ref-on/trials").iterdir()).name
    trial = browse(f"{url}job/ref-on/trial/{folder}", root, "trial-recall.png")
    assert "V2 shadow" in trial and "(agree)" in trial
    # a job against itself is refused, saying why
    status, body = fetch(url + "compare?a=ref-on&b=ref-on")
    assert status == 400 and "nothing differs" in body
    assert (root / "compare.png").stat().st_size > 1000


def test_paths_outside_the_job_folders_are_refused(viewer):
    url, root = viewer
    (root / "secret.txt").write_text("outside")
    for path in ("file/relay/../../secret.txt", "file/relay/%2e%2e/%2e%2e/secret.txt",
                 "file/relay/..%2f..%2fsecret.txt", "job/relay/trial/..%2f..%2f"):
        status, body = fetch(url + path)
        assert status == 404 and "outside" not in body, path
    status, body = fetch(url + "file/relay/result.json")
    assert status == 200 and "mean_reward" in body


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs.extend(v for k, v in attrs if k == "href" and v is not None)


def links_of(html_text: str) -> list[str]:
    parser = Links()
    parser.feed(html_text)
    return parser.hrefs


def as_a_browser_sends(base: str, raw: str) -> str:
    """What a browser requests for an href: tabs and newlines stripped (WHATWG URL parsing),
    resolved against the page, unsafe characters percent-encoded, the fragment dropped."""
    cleaned = raw.replace("\t", "").replace("\n", "").replace("\r", "")
    absolute = urllib.parse.urljoin(base, cleaned)
    return urllib.parse.quote(absolute.split("#")[0], safe=":/?&=%;+,@!$'()*[]~")


def test_every_link_on_every_page_opens(viewer):
    """Crawl the viewer from its jobs page: one page of each kind as Chromium parses it (the
    rest as served), every link followed as a browser would send it. Every one answers 200 (file links once lacked
    their `trials/` segment and answered 404; names with a newline, `?` or `#` were not
    encoded)."""
    url, root = viewer
    seen, queue, broken, rendered, kinds = set(), [url], [], 0, set()
    while queue and len(seen) < 400:
        page_url = queue.pop(0)
        if page_url in seen:
            continue
        seen.add(page_url)
        status, body = fetch(page_url)
        if status != 200:
            broken.append((page_url, status))
            continue
        path = urllib.parse.urlsplit(page_url)
        segments = path.path.strip("/").split("/")
        kind = (segments[0], len(segments))  # jobs, a job, a trial, compare
        if not path.query and segments[0] != "file" and kind not in kinds:
            kinds.add(kind)
            body = browse(page_url, root, "crawl.png")  # the DOM Chromium built
            rendered += 1
        for raw in links_of(body):
            target = as_a_browser_sends(page_url, raw)
            if target.startswith(url):
                queue.append(target)
    assert broken == [] and len(seen) > 30, (broken, len(seen))
    print(f"\nviewer crawl: {len(seen)} links opened, {rendered} pages rendered in Chromium")


def test_odd_names_are_shown_as_they_are_and_open_their_files(viewer):
    url, root = viewer
    folder = next((root / "jobs/odd/trials").iterdir()).name
    trial = browse(f"{url}job/odd/trial/{folder}", root, "trial-odd.png")
    assert "\u202e" not in trial and "artifacts/[U+202E]txt.exe" in trial  # never displayed reversed
    assert "artifacts/new\\nline.txt" in trial  # the newline shown as \n
    opened = {}
    for raw in links_of(trial):
        if "/artifacts/" in raw:
            status, body = fetch(as_a_browser_sends(url, raw))
            opened[urllib.parse.unquote(raw.rsplit("/", 1)[1])] = (status, body)
    expected = {"new\nline.txt", "what?.txt", "hash#1.txt", "pct%41.txt", "space name.txt", "\u202etxt.exe"}
    assert expected <= set(opened), sorted(opened)
    for file_name in expected:
        status, body = opened[file_name]
        assert status == 200 and esc(file_name) in body, (file_name, status)


def test_a_running_job_is_shown_as_it_grows(viewer):
    """A job without result.json yet: its page lists the trials finished so far, says how
    many of the planned, at what rate, and reloads itself; finished, it is the plain page."""
    url, root = viewer
    make_task(root / "slow", "slow", solve="sleep 2\ntouch /app/ok\n")
    proc = subprocess.Popen([ORCHESTRA, "run", "--path", str(root / "slow"), "--agent", "oracle", "-k", "3",
                             "-n", "1", "--jobs-dir", str(root / "jobs"), "--job-name", "growing", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: dict[int, str] = {}
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        status, body = fetch(url + "job/growing")
        if status == 200 and "no result.json yet" in body:
            done = int(re.search(r"(\d+) of 3 trial\(s\) finished", body).group(1))
            seen.setdefault(done, body)
        time.sleep(0.2)
    assert proc.wait(timeout=60) == 0
    assert {1, 2} <= set(seen), sorted(seen)
    assert "http-equiv='refresh'" in seen[1] and seen[1].count("/job/growing/trial/") == 1
    assert seen[2].count("/job/growing/trial/") == 2 and "per minute" in seen[2] and "min left" in seen[2]
    status, body = fetch(url + "job/growing")
    assert status == 200 and "no result.json yet" not in body and "http-equiv" not in body
    assert "3 trials, mean reward <b>1.000</b>" in body and body.count("/job/growing/trial/") == 3
