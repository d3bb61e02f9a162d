#!/usr/bin/env bash
# Build the harness environments under .harness/ (git-ignored), each once: the end-to-end tests
# of the drop-in scorers and of the generated clients run the real harnesses from them.
#
#   .harness/inspect     inspect-ai + the light client (client/, installed as a user installs
#                        it, not editable; also the "installs alone" check below)
#   .harness/autoevals   autoevals on the openai 3.x SDK + the light client: they must resolve
#   .harness/lmeval      torch 2.13.0 (CPU) first, then lm-eval + the light client
#   .harness/openapi     openapi-python-client (the generator)
#   .harness/node        npm ci of harness/node: promptfoo, openapi-typescript, openapi-fetch, tsx
#
# Usage: scripts/harness-envs.sh [ENV...]   (default: all of them)
# Pins: harness/<env>.txt (pip -c), harness/node/package-lock.json. Each environment is stamped
# with the hashes of its inputs: when its pins change, its packages are installed again (in place;
# rm -r .harness/<env> starts afresh); when only the light client's sources change, only the
# client is; when nothing changed, nothing is done or printed. A failed install exits non-zero
# with the end of its log (.harness/<env>.log): a harness test never skips for want of it.
# HARNESS_DIR puts the environments elsewhere (default .harness).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
root=${HARNESS_DIR:-.harness}
client=client
mkdir -p "$root"

# The light client's own files, whatever git knows of them (a build's leftovers left out).
client_files() {
  find "$client" \( -name build -o -name '*.egg-info' -o -name __pycache__ \) -prune -o -type f \
    -print | LC_ALL=C sort
}

# sha256 of the named files' paths and contents.
hash_of() {
  local file
  for file in "$@"; do
    printf '%s\n' "$file"
    cat "$file"
  done | sha256sum | cut -d' ' -f1
}

fail() {  # ENV LOG MESSAGE
  echo "harness-envs: $1: $3; the end of $2:" >&2
  tail -n 25 "$2" >&2
  exit 1
}

# The light client as a user installs it: a wheel built (once a run) from a clean copy of its
# sources; an in-tree build folder could carry a module deleted since.
wheel=
wheel_dir=
trap 'rm -rf "$wheel_dir"' EXIT
client_wheel() {  # LOG
  if [ -n "$wheel" ]; then
    return
  fi
  local copy out
  copy=$(mktemp -d)
  out=$(mktemp -d)
  wheel_dir=$out
  tar -C "$client" --exclude=build --exclude='*.egg-info' --exclude=__pycache__ -cf - . \
    | tar -C "$copy" -xf -
  if ! "$python" -m pip wheel --progress-bar off --no-deps -w "$out" "$copy" >>"$1" 2>&1; then
    rm -rf "$copy"
    fail client "$1" "building the light client's wheel failed"
  fi
  rm -rf "$copy"
  wheel=$(echo "$out"/bonusjudge_client-*.whl)
}

install_client() {  # ENV LOG PINS
  client_wheel "$2"
  # Its requirements, then itself again whatever its version says (the sources changed).
  if ! "$root/$1/bin/python" -m pip install --progress-bar off -c "$3" "$wheel" >>"$2" 2>&1 \
      || ! "$root/$1/bin/python" -m pip install --progress-bar off --force-reinstall --no-deps \
        "$wheel" >>"$2" 2>&1
  then
    fail "$1" "$2" "installing the light client failed"
  fi
  # Installs alone: nothing heavy among the light client's requirements, however deep. The
  # harness may bring numpy or FastAPI itself; what is checked is what we pull in.
  if ! "$root/$1/bin/python" - >>"$2" 2>&1 <<'EOF'
from importlib.metadata import PackageNotFoundError, requires
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name

HEAVY = {"torch", "transformers", "litellm", "instructor", "fastapi", "starlette", "uvicorn",
         "sqlalchemy", "alembic", "numpy", "scipy", "scikit-learn", "matplotlib", "bonusjudge"}
seen, todo = set(), ["bonusjudge-client"]
while todo:
    name = todo.pop()
    try:
        specs = requires(name) or []
    except PackageNotFoundError:
        continue
    for spec in specs:
        req = Requirement(spec)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            dep = canonicalize_name(req.name)
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
heavy = sorted(seen & HEAVY)
print("bonusjudge-client requires, all in all:", ", ".join(sorted(seen)))
if heavy:
    raise SystemExit(f"bonusjudge-client pulls in {', '.join(heavy)}: it must install alone")
EOF
  then
    fail "$1" "$2" "the light client does not install alone"
  fi
}

# python_env ENV [--first PACKAGE]... [--client] PACKAGE...: the --first packages installed
# alone before the rest; --client adds the light client.
python_env() {
  local env=$1 pins=harness/$1.txt log=$root/$1.log stamp=$root/$1/.harness-stamp
  shift
  local first=() rest=() with_client=0 pins_hash client_hash=none done_pins= done_client=
  while [ $# -gt 0 ]; do
    case $1 in
      --first) first+=("$2"); shift 2 ;;
      --client) with_client=1; shift ;;
      *) rest+=("$1"); shift ;;
    esac
  done
  pins_hash=$(hash_of "$pins")
  if [ "$with_client" = 1 ]; then
    mapfile -t files < <(client_files)
    client_hash=$(hash_of "${files[@]}")
  fi
  if [ -f "$stamp" ]; then
    read -r done_pins done_client <"$stamp" || true
  fi
  if [ "$done_pins" = "$pins_hash" ] && [ "$done_client" = "$client_hash" ]; then
    return
  fi
  echo "harness-envs: building $root/$env (pip's log: $log)"
  local started=$SECONDS
  : >"$log"
  if [ "$done_pins" != "$pins_hash" ]; then
    if [ ! -x "$root/$env/bin/python" ]; then
      "$python" -m venv "$root/$env" >>"$log" 2>&1 || fail "$env" "$log" "python -m venv failed"
    fi
    local pip=("$root/$env/bin/python" -m pip install --progress-bar off -c "$pins")
    if [ ${#first[@]} -gt 0 ]; then
      "${pip[@]}" "${first[@]}" >>"$log" 2>&1 || fail "$env" "$log" "pip install ${first[*]} failed"
    fi
    "${pip[@]}" "${rest[@]}" >>"$log" 2>&1 || fail "$env" "$log" "pip install ${rest[*]} failed"
  fi
  if [ "$with_client" = 1 ]; then
    install_client "$env" "$log" "$pins"
  fi
  echo "$pins_hash $client_hash" >"$stamp"
  echo "harness-envs: $root/$env built in $((SECONDS - started)) s ($(du -sh "$root/$env" | cut -f1))"
}

node_env() {
  local env=node log=$root/node.log stamp=$root/node/.harness-stamp hash
  hash=$(hash_of harness/node/package.json harness/node/package-lock.json)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
    return
  fi
  echo "harness-envs: building $root/node (npm's log: $log)"
  local started=$SECONDS
  : >"$log"
  mkdir -p "$root/node"
  cp harness/node/package.json harness/node/package-lock.json "$root/node/"
  # promptfoo's optional browser package would fetch a Chromium build: none is reachable, and
  # none is needed to grade text.
  (cd "$root/node" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund) >>"$log" 2>&1 \
    || fail node "$log" "npm ci failed"
  echo "$hash" >"$stamp"
  echo "harness-envs: $root/node built in $((SECONDS - started)) s ($(du -sh "$root/node" | cut -f1))"
}

build() {
  case $1 in
    inspect) python_env inspect inspect-ai --client ;;
    autoevals) python_env autoevals autoevals openai --client ;;
    # torch first and alone, pinned: the CPU wheel on disk, where an unpinned torch pulls GBs.
    lmeval) python_env lmeval --first torch==2.13.0 lm-eval --client ;;
    openapi) python_env openapi openapi-python-client ;;
    node) node_env ;;
    *) echo "harness-envs: unknown environment $1 (inspect, autoevals, lmeval, openapi, node)" >&2
       exit 2 ;;
  esac
}

if [ $# -eq 0 ]; then
  set -- inspect autoevals lmeval openapi node
fi
for env in "$@"; do
  build "$env"
done
