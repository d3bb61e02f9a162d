#!/usr/bin/env bash
# The main job on a fresh machine, with no key and no network beyond the package registry:
# install, start the service on the embedded defaults (offline matcher judge, local cache),
# grade the bundled English + Chinese example set through the client, print the table.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
step() { printf '\n[%s] %s\n' "$1" "$2"; }
step 1/4 "installing into .venv (pinned versions; the first time takes a few minutes; log: out/setup.log)"
# pip's own progress, a line per package, instead of minutes of silence.
if ! BONUSJUDGE_PIP_QUIET= scripts/setup.sh \
    > >(tee out/setup.log | { grep --line-buffered -E '^ *(Collecting|Downloading|Installing|Successfully)' || true; }) 2>&1
then
  sleep 1; echo "install failed; see out/setup.log"; exit 1
fi
sleep 1  # let the progress filter print its last lines
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
port=${BONUSJUDGE_PORT:-8765}
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
  if ! kill -0 $server 2>/dev/null; then cat "$workdir/serve.log"; exit 1; fi
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
