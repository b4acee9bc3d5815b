#!/usr/bin/env bash
# The project's test command (README; .ci/run): formatting, lints for both
# targets, native tests, the deployment proof (scripts/deploy-check.mjs:
# wrangler deploy --dry-run of the demo), the wasm test build, then the
# end-to-end tests against the built wasm in Miniflare, then a short run of
# the attack harness (scripts/attack/). Stops at the first failing step.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

# Each step's wall time, printed as it ends and again in a table at the end
# (also when a step fails), so a CI log says where the minutes go.
step_names=()
step_secs=()
step_t0=""
step_end() {
  [ -n "$step_t0" ] || return 0
  local secs
  secs=$(awk -v a="$step_t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  step_secs+=("$secs")
  printf '[time] %s: %ss\n' "${step_names[-1]}" "$secs"
  step_t0=""
}
step() {
  step_end
  step_names+=("$*")
  step_t0=$EPOCHREALTIME
  printf '\n==== %s ====\n' "$*"
}
test_t0=$EPOCHREALTIME
summary() {
  local rc=$? i
  step_end
  printf '\n==== step times (exit %s) ====\n' "$rc"
  for i in "${!step_secs[@]}"; do printf '%8ss  %s\n' "${step_secs[$i]}" "${step_names[$i]}"; done
  awk -v a="$test_t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%8.1fs  total\n", b - a }'
}
trap summary EXIT

for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
    echo "[env] installing rustup component $component" >&2
    rustup component add "$component" >&2
  fi
done

# Debian's Chromium for tests/e2e/ui-chromium.test.mjs (a fresh machine and
# CI start without it); playwright-core drives it, no browser download.
if [ ! -x /usr/bin/chromium ]; then
  step "apt-get install chromium (the browser bridge's headless test)"
  if command -v apt-get >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium \
      || echo "[test] chromium could not be installed; tests/e2e/ui-chromium.test.mjs will skip" >&2
  else
    echo "[test] no apt-get: tests/e2e/ui-chromium.test.mjs will skip" >&2
  fi
fi

step "cargo fmt --check"
cargo fmt --check

step "cargo clippy (native)"
cargo clippy --all-targets -- -D warnings

step "cargo clippy (wasm32)"
cargo clippy --target wasm32-unknown-unknown --lib -- -D warnings
cargo clippy --target wasm32-unknown-unknown --lib --features fault-injection -- -D warnings

step "lean build (no default features): clippy, the tests of what it refuses, its size"
cargo clippy --all-targets --no-default-features -- -D warnings
cargo clippy --target wasm32-unknown-unknown --lib --no-default-features -- -D warnings
cargo test --no-default-features a_lean_build
# The lean wasm's 500 KiB bound (about 80 s: a release build). The default
# deployment proof below replaces the production wasm it leaves in build/.
SHIITAKE_LEAN=1 node scripts/deploy-check.mjs

step "cargo test"
cargo test

step "deployment proof (wrangler deploy --dry-run of the demo: production build, bundle, bindings, SQLite migration)"
# Before the test build: wrangler's [build] leaves the production wasm in
# build/, which the next step replaces.
node scripts/deploy-check.mjs

step "build (wasm + demo bundle; test build: with the fault-injection hook)"
SHIITAKE_TEST_BUILD=1 bash scripts/build.sh

# tests/e2e/chat-cli.test.mjs drives the terminal client inside tmux.
if ! command -v tmux >/dev/null 2>&1; then
  echo "[env] installing tmux" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >&2
fi

step "end-to-end tests (node --test, Miniflare)"
# Node 24's --test takes globs, not directories.
node --test --test-concurrency=1 'tests/e2e/**/*.test.mjs'

step "attack harness, short (scripts/attack/all.mjs: crash, fuzz, races)"
node scripts/attack/all.mjs --short
