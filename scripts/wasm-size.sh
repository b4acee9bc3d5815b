#!/usr/bin/env bash
# What each dependency costs in the deployed wasm (zlib gzip -9, what Cloudflare's
# limit counts). Two kinds of figure:
#
#  1. attribution: the wasm built with names (SHIITAKE_WASM_NAMES), every
#     function body given to the crate its name belongs to
#     (scripts/wasm-size.mjs crates); data segments are not attributed;
#  2. removal: the wasm built without a Cargo feature, so without the
#     dependencies behind it; the difference is exact.
#
# Usage: bash scripts/wasm-size.sh [variant...]   (default: all)
#   variants: default, lean, no-json-schema, no-files-search, no-files,
#   no-error-paths, no-mcp, no-regex (each the default minus what it names;
#   no-regex: neither json-schema nor files-search, the two features linking
#   regex)
# Builds in target/ one after another (incremental, LTO: a minute or two
# each); leaves build/wasm/ as it was (its builds go to target/wasm-size/).
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

out=target/wasm-size
mkdir -p "$out"

# One variant: cargo features, then wasm-bindgen as scripts/build.sh runs it
# (names kept for attribution; the gzip figure is of the wasm without them).
build() { # name, cargo feature args...
  local name=$1
  shift
  cargo build --release --target wasm32-unknown-unknown --lib "$@" >&2
  rm -rf "$out/$name"
  "$WASM_BINDGEN" --names target/wasm32-unknown-unknown/release/shiitake.wasm "$out/$name"
  "$WASM_BINDGEN" target/wasm32-unknown-unknown/release/shiitake.wasm "$out/$name.stripped"
}

# Node's zlib at level 9, as scripts/deploy-check.mjs measures the bound
# (GNU gzip -9 gives about 2% less).
gzip_bytes() { node -e 'process.stdout.write(String(require("zlib").gzipSync(require("fs").readFileSync(process.argv[1]), { level: 9 }).length))' "$1"; }
kib() { awk -v b="$1" 'BEGIN { printf "%7.1f KiB", b / 1024 }'; }

variants=("$@")
[ ${#variants[@]} = 0 ] && variants=(default no-json-schema no-files-search no-files no-error-paths no-mcp no-regex lean)

declare -A size
for v in "${variants[@]}"; do
  case $v in
    default) build default ;;
    lean) build lean --no-default-features ;;
    no-json-schema) build no-json-schema --no-default-features --features files-search,error-paths,acp,ui,mcp ;;
    no-files-search) build no-files-search --no-default-features --features json-schema,files,error-paths,acp,ui,mcp ;;
    no-files) build no-files --no-default-features --features json-schema,error-paths,acp,ui,mcp ;;
    no-error-paths) build no-error-paths --no-default-features --features json-schema,files-search,acp,ui,mcp ;;
    no-mcp) build no-mcp --no-default-features --features json-schema,files-search,error-paths,acp,ui ;;
    no-regex) build no-regex --no-default-features --features files,error-paths,acp,ui,mcp ;;
    *) echo "wasm-size: unknown variant $v" >&2; exit 2 ;;
  esac
  size[$v]=$(gzip_bytes "$out/$v.stripped/shiitake_bg.wasm")
done

echo
echo "== zlib gzip -9 of shiitake_bg.wasm as deployed (no name section)"
for v in "${variants[@]}"; do
  printf '%-18s %9d bytes  %s' "$v" "${size[$v]}" "$(kib "${size[$v]}")"
  if [ -n "${size[default]:-}" ] && [ "$v" != default ]; then
    printf '   (default minus %s)' "$(kib $((size[default] - size[$v])))"
  fi
  echo
done

have() { for v in "$@"; do [ -n "${size[$v]:-}" ] || return 1; done; }
if have default no-json-schema no-files-search no-files no-error-paths no-mcp no-regex; then
  schema=$((size[default] - size[no-json-schema]))
  search=$((size[default] - size[no-files-search]))
  files=$((size[default] - size[no-files]))
  paths=$((size[default] - size[no-error-paths]))
  mcp=$((size[default] - size[no-mcp]))
  echo
  echo "== by removal (zlib gzip -9)"
  echo "json-schema: boon and what only it links (url, idna, fluent-uri, ahash, base64)  $(kib "$schema")"
  echo "files-search: ignore, globset (and their search code)                            $(kib "$search")"
  echo "files: the files module, its patch engine and workspace port (with its search)   $(kib "$files")"
  echo "error-paths: serde_path_to_error                                                 $(kib "$paths")"
  echo "mcp: the MCP client (connection, wire, tool results) and its host side           $(kib "$mcp")"
  echo "regex, regex-automata, regex-syntax (unicode tables), aho-corasick, memchr:"
  echo "  linked by json-schema and files-search, gone only when both are              $(kib $((size[default] - size[no-regex] - schema - search)))"
fi

for v in "${variants[@]}"; do
  echo
  echo "== $v: functions by crate"
  node scripts/wasm-size.mjs crates "$out/$v/shiitake_bg.wasm"
done
