#!/usr/bin/env bash
# The main job on a fresh machine, with no key and no network beyond the package registry:
# install, start the service on the embedded defaults (offline matcher judge, local cache),
# grade the bundled English + Chinese example set through the client, print the table.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
step() { printf '\n[%s] %s\n' "$1" "$2"; }
port=${BONUSJUDGE_PORT:-8765}
# The port is checked before minutes of installing, and before the service starts: a port another
# program holds would make serve exit, or, were another bonusjudge on it, the demo grade there.
if ! [[ $port =~ ^[0-9]{1,5}$ ]] || ((10#$port < 1 || 10#$port > 65535)); then
  echo "BONUSJUDGE_PORT must be a port number (1-65535), got '$port'" >&2
  exit 1
fi
port=$((10#$port))
port_free() {
  "${PYTHON:-python3}" - "$port" <<'PY'
import socket, sys
with socket.socket() as sock:
    # As uvicorn binds: a port left in TIME_WAIT by a stopped service is free.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", int(sys.argv[1])))
    except OSError:
        sys.exit(1)
PY
}
port_taken() {
  echo "port $port on 127.0.0.1 is in use; pick another: BONUSJUDGE_PORT=$((port % 65535 + 1)) scripts/demo.sh" >&2
  exit 1
}
port_free || port_taken
step 1/4 "setting up .venv"
# setup.sh shows pip's progress, a line per package, instead of minutes of silence.
if ! BONUSJUDGE_SETUP_LOG=out/setup.log scripts/setup.sh; then
  echo "install failed; see out/setup.log"; exit 1
fi
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
workdir=${BONUSJUDGE_DEMO_DIR:-out/demo}
mkdir -p "$workdir"
step 2/4 "starting bonusjudge serve on 127.0.0.1:$port (offline embedded-matcher judge; loading the encoder)"
.venv/bin/bonusjudge serve --port "$port" --cache-dir "$workdir/cache" > "$workdir/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do
  if .venv/bin/python - "$port" <<'PY' 2>/dev/null; then break; fi
import sys, httpx
r = httpx.get(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=2)
sys.exit(0 if r.status_code == 200 else 1)
PY
  if ! kill -0 $server 2>/dev/null; then
    cat "$workdir/serve.log"
    port_free || port_taken  # taken since the check above
    exit 1
  fi
  sleep 1
done
step 3/4 "grading judge/data/examples_chartom.jsonl (English and Chinese) through the service"
rm -f "$workdir/results.jsonl"
.venv/bin/bonusjudge grade judge/data/examples_chartom.jsonl --server "http://127.0.0.1:$port" \
  --out "$workdir/results.jsonl" --summary "$workdir/summary.json" --quiet
step 4/4 "stopping the service"
cat <<MSG

Results: $workdir/results.jsonl, summary: $workdir/summary.json (judge: embedded-matcher,
offline; coverage only, defects not assessed; a non-LLM matcher, weak where meaning turns on
negation or on a paraphrase that shares neither words nor dictionary synonyms with the point).

Run bonusjudge as .venv/bin/bonusjudge, or 'source .venv/bin/activate' first.
To grade with an LLM judge instead:
  .venv/bin/bonusjudge grade judge/data/examples_chartom.jsonl --out out/gpt4o.jsonl \\
      --model openai/gpt-4o --api-key-env OPENAI_API_KEY
or a local OpenAI-compatible server (llama.cpp, vLLM, Ollama):
  .venv/bin/bonusjudge grade judge/data/examples_chartom.jsonl --out out/local.jsonl \\
      --model openai/MODEL --api-base http://127.0.0.1:8080/v1 --mode json_schema
MSG
