# shellcheck shell=bash
# Sourced by the other scripts (not run on its own). Puts the pinned tool
# versions on PATH, installing whatever is missing, so that a fresh machine with
# only rustup/cargo, an old system Node and npm gets there by itself.
# Sets: ROOT, TOOLS, WASM_BINDGEN, and PATH (Node >= 22.12 first).
# Quiet when everything is present; says on stderr what it installs.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${SHIITAKE_TOOLS_DIR:-$ROOT/.tools}"
export ROOT TOOLS

# Exact versions: wasm-bindgen's generator (tools/bindgen) must equal the
# crate's `=0.2.130` pin,
# and Node 24 is the LTS that wrangler 4.164 and Miniflare are verified on.
SHIITAKE_NODE_VERSION=24.22.3
SHIITAKE_WASM_BINDGEN_VERSION=0.2.130

_shiitake_say() { echo "[env] $*" >&2; }

_shiitake_env() {
  local missing
  for missing in cargo rustup npm; do
    if ! command -v "$missing" >/dev/null 2>&1; then
      _shiitake_say "error: '$missing' is not on PATH (needed: rustup/cargo, npm)"
      return 1
    fi
  done
  mkdir -p "$TOOLS" || return 1

  # Installs below may take minutes; a second script started meanwhile waits
  # instead of installing the same thing twice into the same folder.
  local lockfd
  exec {lockfd}>"$TOOLS/.install.lock" || return 1
  flock "$lockfd" || return 1

  # The generator's build (CPU) runs beside npm ci (network and disk).
  local rc=0 bindgen_pid
  _shiitake_node && _shiitake_rust_target || rc=$?
  if [ "$rc" -eq 0 ]; then
    _shiitake_wasm_bindgen &
    bindgen_pid=$!
    _shiitake_node_modules || rc=$?
    wait "$bindgen_pid" || rc=$?
    _shiitake_wasm_bindgen_path
  fi
  exec {lockfd}>&-
  return $rc
}

_shiitake_node_ok() {
  command -v node >/dev/null 2>&1 &&
    node -e 'const [a, b] = process.versions.node.split(".").map(Number);
             process.exit(a > 22 || (a === 22 && b >= 12) ? 0 : 1)' 2>/dev/null
}

_shiitake_node() {
  _shiitake_node_ok && return 0
  local arch
  case "$(uname -m)" in
    x86_64 | amd64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) _shiitake_say "error: no Node >= 22.12 on PATH and no npm Node package for $(uname -m)"; return 1 ;;
  esac
  # The npm registry ships Node itself as a package (binary only, no npm: the
  # system npm keeps working and runs on whichever node is first on PATH).
  local prefix="$TOOLS/node24"
  local bin="$prefix/node_modules/node-linux-$arch/bin"
  if [ "$("$bin/node" --version 2>/dev/null)" != "v$SHIITAKE_NODE_VERSION" ]; then
    _shiitake_say "system Node is $(node --version 2>/dev/null || echo absent); installing Node $SHIITAKE_NODE_VERSION into $prefix"
    rm -rf "$prefix"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
      "node-linux-$arch@$SHIITAKE_NODE_VERSION" >&2 || return 1
  fi
  export PATH="$bin:$PATH"
  hash -r
  _shiitake_node_ok || { _shiitake_say "error: $bin/node does not run"; return 1; }
}

_shiitake_rust_target() {
  rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown && return 0
  _shiitake_say "installing Rust target wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown >&2
}

_shiitake_wasm_bindgen() {
  # tools/bindgen: wasm-bindgen's generator (the official
  # `wasm-bindgen-cli-support` at the crate's pin) behind build.sh's options,
  # byte-identical output; installing the `wasm-bindgen-cli` package instead
  # also compiled its test runner's HTTP and TLS stacks (165 s of CPU on a
  # cold machine against 81 s). Keyed by its sources, so a change rebuilds it.
  local dir pin
  pin=$(sed -n 's/^wasm-bindgen = "=\(.*\)"$/\1/p' "$ROOT/Cargo.toml")
  grep -qx "wasm-bindgen-cli-support = \"=$pin\"" "$ROOT/tools/bindgen/Cargo.toml" && [ "$pin" = "$SHIITAKE_WASM_BINDGEN_VERSION" ] ||
    { _shiitake_say "error: the wasm-bindgen pins differ (Cargo.toml $pin, tools/bindgen/Cargo.toml, env.sh $SHIITAKE_WASM_BINDGEN_VERSION)"; return 1; }
  _shiitake_wasm_bindgen_path || return 1
  dir=$(dirname "$WASM_BINDGEN")
  [ "$("$WASM_BINDGEN" --version 2>/dev/null)" = "shiitake-bindgen $SHIITAKE_WASM_BINDGEN_VERSION" ] && return 0
  _shiitake_say "building tools/bindgen (wasm-bindgen-cli-support $SHIITAKE_WASM_BINDGEN_VERSION) into $dir (about a minute)"
  rm -rf "$TOOLS/bindgen-target"
  cargo build --quiet --release --locked --manifest-path "$ROOT/tools/bindgen/Cargo.toml" \
    --target-dir "$TOOLS/bindgen-target" >&2 || return 1
  mkdir -p "$dir" && cp "$TOOLS/bindgen-target/release/shiitake-bindgen" "$WASM_BINDGEN" || return 1
  rm -rf "$TOOLS/bindgen-target"
  [ "$("$WASM_BINDGEN" --version 2>/dev/null)" = "shiitake-bindgen $SHIITAKE_WASM_BINDGEN_VERSION" ] ||
    { _shiitake_say "error: $WASM_BINDGEN does not report version $SHIITAKE_WASM_BINDGEN_VERSION"; return 1; }
}

# Sets WASM_BINDGEN: where the generator of tools/bindgen's sources lives.
_shiitake_wasm_bindgen_path() {
  local key
  key="$(cat "$ROOT/tools/bindgen/Cargo.toml" "$ROOT/tools/bindgen/Cargo.lock" "$ROOT/tools/bindgen/src/main.rs" | sha256sum | cut -c1-16)" || return 1
  WASM_BINDGEN="$TOOLS/bindgen-$SHIITAKE_WASM_BINDGEN_VERSION-$key/shiitake-bindgen"
  export WASM_BINDGEN
}

_shiitake_node_modules() {
  local stamp="$ROOT/node_modules/.shiitake-lock.sha256" want
  want="$(sha256sum "$ROOT/package-lock.json" | cut -d' ' -f1)" || return 1
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && return 0
  _shiitake_say "installing node_modules from package-lock.json (npm ci)"
  (cd "$ROOT" && npm ci --no-audit --no-fund --loglevel=error >&2) || return 1
  echo "$want" >"$stamp"
}

_shiitake_env || { _shiitake_say "error: environment setup failed"; return 1 2>/dev/null || exit 1; }
