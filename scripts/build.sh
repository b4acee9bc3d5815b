#!/usr/bin/env bash
# Builds the wasm core and its JS glue into build/wasm/, then the demo Worker
# into build/demo/ (index.mjs + shiitake_bg.wasm, loadable by Miniflare).
# Incremental: never cleans target/.
# No wasm-opt: on top of rustc's opt-level=z + LTO, binaryen's -Oz cut the raw
# size ~10% but made the gzip size (what Cloudflare's limit counts) ~10%
# worse (binaryen 132); scripts/wasm-size.sh says what each dependency costs.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

now() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1fs", (b - a) / 1e9 }'; }
size_line() { # raw and gzip size of a file
  local raw gz
  raw=$(stat -c %s "$1")
  # Node's zlib at level 9, as scripts/deploy-check.mjs (and wrangler)
  # measure it: GNU gzip -9 gives about 2% less.
  gz=$(node -e 'process.stdout.write(String(require("zlib").gzipSync(require("fs").readFileSync(process.argv[1]), { level: 9 }).length))' "$1")
  awk -v r="$raw" -v g="$gz" 'BEGIN { printf "%.0f KiB raw, %.0f KiB gzip", r / 1024, g / 1024 }'
}

# SHIITAKE_TEST_BUILD=1 compiles the fault-injection hook the e2e suite and
# the attack harness use (Cargo feature `fault-injection`); the wasm users
# deploy never has it.
# SHIITAKE_LEAN=1 builds without the default Cargo features (json-schema,
# files, files-search, error-paths: see Cargo.toml), for hosts that use none
# of them; a host that does gets a 503 or a tool error naming the missing
# feature.
# Both compile this crate and the dependencies Cargo.toml raises to 2 at
# opt-level z (see there): the lean build's bound is tight.
flags=()
size_first=()
for package in shiitake serde_json serde_core itoa memchr wasm-bindgen js-sys; do
  size_first+=(--config "profile.release.package.$package.opt-level=\"z\"")
done
[ "${SHIITAKE_LEAN:-0}" = 1 ] && flags+=(--no-default-features "${size_first[@]}")
[ "${SHIITAKE_TEST_BUILD:-0}" = 1 ] && flags+=(--features fault-injection "${size_first[@]}")
# The JS copy of the core's bounds (js/limits.mjs, committed: the typed
# client and the CLI run without a build) follows src/limits.rs.
node scripts/gen-limits.mjs
t0=$(now)
# SHIITAKE_DENY_WARNINGS=1 (scripts/test.sh): a compiler warning fails the
# build (cargo repeats a fresh crate's cached warnings, so a warm build
# fails alike).
cargo_log=$(mktemp)
trap 'rm -f "$cargo_log"' EXIT
cargo build --release --target wasm32-unknown-unknown --lib "${flags[@]}" 2> >(tee "$cargo_log" >&2)
wait $! 2>/dev/null || true # the tee
if [ "${SHIITAKE_DENY_WARNINGS:-0}" = 1 ] && grep -q '^warning' "$cargo_log"; then
  echo "build: the compiler warned, and warnings are denied (SHIITAKE_DENY_WARNINGS=1)" >&2
  exit 1
fi
t1=$(now)

out=build/wasm
rm -rf "$out.tmp"
# --experimental-reset-state-function exports __wbg_reset_state, which
# js/do/recovery.mjs calls to replace the instance after a Rust panic. The name section
# (function names in wasm stack traces) costs ~25% of the gzip size: kept
# only with SHIITAKE_WASM_NAMES=1.
names=()
[ "${SHIITAKE_WASM_NAMES:-0}" = 1 ] && names=(--names)
# tools/bindgen: `wasm-bindgen --target module --out-name shiitake
# --experimental-reset-state-function --remove-producers-section
# [--remove-name-section]`.
"$WASM_BINDGEN" "${names[@]}" target/wasm32-unknown-unknown/release/shiitake.wasm "$out.tmp"
# wasm-bindgen emits a source-phase import (`import source m from "x.wasm"`),
# which workerd does not load; a plain wasm import gives the same
# WebAssembly.Module under the CompiledWasm module rule. Same patch as
# workers-rs's worker-build (fix_wasm_import).
sed -i 's/^import source /import /' "$out.tmp/shiitake.js"
if grep -q '^import source ' "$out.tmp/shiitake.js" || ! grep -q '^import wasmModule from "./shiitake_bg.wasm";' "$out.tmp/shiitake.js"; then
  echo "build: wasm-bindgen's wasm import changed shape; update the patch in scripts/build.sh" >&2
  exit 1
fi
# The glue imports the shim's js/do/body.mjs from a copy wasm-bindgen makes
# under snippets/; the shim imports the file itself, so a bundle would hold
# both (two module instances of one file). The glue's import statements are
# pointed at the file itself (the import object keeps the snippet's name:
# it is the name the wasm imports by) and the copy is dropped.
sed -i -E 's#^(import .* from ["\x27])\./snippets/shiitake-[0-9a-f]+/js/do/body\.mjs(["\x27];?)$#\1../../js/do/body.mjs\2#' "$out.tmp/shiitake.js"
if grep -q '^import .*snippets/' "$out.tmp/shiitake.js"; then
  echo "build: wasm-bindgen's snippet import changed shape; update the patch in scripts/build.sh" >&2
  exit 1
fi
rm -rf "$out.tmp/snippets"
# wasm-bindgen writes a package.json (the crate's npm dependencies) beside
# the glue once the core imports a JS snippet (js/do/body.mjs); without
# "type": "module" it would make Node read the glue as CommonJS first. The
# repository's own package.json covers build/wasm/.
rm -f "$out.tmp/package.json"
t2=$(now)

rm -rf "$out"
mv "$out.tmp" "$out"
node scripts/chat-page.mjs >/dev/null
node scripts/bundle.mjs js/demo.mjs build/demo >/dev/null
t3=$(now)

echo "build: cargo $(secs "$t0" "$t1"), wasm-bindgen $(secs "$t1" "$t2"), bundle $(secs "$t2" "$t3")"
echo "build: $out/shiitake_bg.wasm: $(size_line "$out/shiitake_bg.wasm")"
echo "build: build/demo/index.mjs: $(size_line build/demo/index.mjs)"
