"""What a run's start-up leaves unloaded (bench/run.py's startup_seconds), and that what
was left out still works when it is wanted. Each check runs in a fresh interpreter: the
test process has loaded everything already."""

import json
import subprocess
import sys


def _fresh(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_run_loads_neither_asyncio_nor_character_detection_nor_paramiko():
    loaded = _fresh(
        "import sys, json\n"
        "import orchestrator.cli.commands, orchestrator.cli.run, orchestrator.job.runner\n"
        "import orchestrator.job.preflight, orchestrator.runtime.docker, orchestrator.trial.lifecycle\n"
        "print(json.dumps({m: m in sys.modules for m in\n"
        "  ('asyncio', 'charset_normalizer', 'chardet', 'paramiko', 'docker', 'structlog')}))")
    assert loaded == {"asyncio": False, "charset_normalizer": False, "chardet": False,
                      "paramiko": False, "docker": True, "structlog": True}


def test_structlogs_async_methods_load_asyncio_when_called():
    seen = _fresh(
        "import sys, json\n"
        "from orchestrator.log import structlog\n"
        "before = 'asyncio' in sys.modules\n"
        "import asyncio\n"
        "async def main():\n"
        "    await structlog.stdlib.get_logger('t').ainfo('x')\n"
        "    await structlog.get_logger().ainfo('y')\n"
        "    return 'ran'\n"
        "print(json.dumps({'before': before, 'result': asyncio.run(main()),\n"
        "                  'real': type(sys.modules['asyncio']).__name__}))")
    assert seen == {"before": False, "result": "ran", "real": "module"}


def test_an_undeclared_encoding_is_read_as_utf8_and_the_modules_are_importable_again():
    seen = _fresh(
        "import json, sys\n"
        "import orchestrator.runtime.client\n"
        "import requests\n"
        "assert requests.compat.chardet is None and 'charset_normalizer' not in sys.modules\n"
        "r = requests.models.Response()\n"
        "r._content, r.encoding = 'é'.encode(), None\n"
        "import charset_normalizer\n"  # hidden only while docker-py loaded
        "print(json.dumps({'text': r.text, 'guess': r.apparent_encoding}))")
    assert seen == {"text": "é", "guess": "utf-8"}
