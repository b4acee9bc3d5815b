#!/usr/bin/env bash
# The project's test command (README; .ci/run): formatting, lints for both
# targets, native tests, the deployment proof (scripts/deploy-check.mjs:
# wrangler deploy --dry-run of the demo), the wasm test build, then the
# end-to-end tests against the built wasm in Miniflare, then a short run of
# the attack harness (scripts/attack/). Stops at the first failing step. The
# release builds run in the background beside the lints and native tests,
# and the end-to-end files in lanes at once (scripts/e2e.sh).
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

# Each step's wall time and the CPU time its processes used (user + system,
# of the processes it waited for), printed as it ends and again in a table at
# the end (also when a step fails), so a CI log says where the minutes go.
step_names=()
step_secs=()
step_cpus=()
step_t0=""
# CPU seconds of this shell's waited-for children so far (cutime + cstime).
clk_tck=$(getconf CLK_TCK)
cpu_now() { awk -v hz="$clk_tck" '{ sub(/^.*\) /, ""); printf "%.1f", ($14 + $15) / hz }' "/proc/$$/stat"; }
step_end() {
  [ -n "$step_t0" ] || return 0
  local secs cpu
  secs=$(awk -v a="$step_t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  cpu=$(awk -v a="$step_c0" -v b="$(cpu_now)" 'BEGIN { printf "%.1f", b - a }')
  step_secs+=("$secs")
  step_cpus+=("$cpu")
  printf '[time] %s: %ss (CPU %ss)\n' "${step_names[-1]}" "$secs" "$cpu"
  step_t0=""
}
step() {
  step_end
  step_names+=("$*")
  step_t0=$EPOCHREALTIME
  step_c0=$(cpu_now)
  printf '\n==== %s ====\n' "$*"
}
test_t0=$EPOCHREALTIME
summary() {
  local rc=${1:-$?} i
  step_end
  printf '\n==== step times (exit %s): wall, CPU ====\n' "$rc"
  for i in "${!step_secs[@]}"; do printf '%8ss %8ss  %s\n' "${step_secs[$i]}" "${step_cpus[$i]}" "${step_names[$i]}"; done
  awk -v a="$test_t0" -v b="$EPOCHREALTIME" -v c="$(cpu_now)" 'BEGIN { printf "%8.1fs %8.1fs  total\n", b - a, c }'
}
trap summary EXIT

for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
    echo "[env] installing rustup component $component" >&2
    rustup component add "$component" >&2
  fi
done

# Debian packages the end-to-end tests use, installed in the background
# beside the builds (apt waits on the network and the disk, the builds on
# the CPU) and awaited before the tests: Chromium for the browser bridge's
# and the chat page's headless tests (playwright-core drives it, no browser
# download; without it those tests skip), tmux for the terminal client's.
apt_missing=()
[ -x /usr/bin/chromium ] || apt_missing+=(chromium)
command -v tmux >/dev/null 2>&1 || apt_missing+=(tmux)
apt_pid=""
if [ "${#apt_missing[@]}" -gt 0 ]; then
  echo "[env] installing ${apt_missing[*]} with apt-get in the background" >&2
  apt_log=$(mktemp)
  apt_install() {
    command -v apt-get >/dev/null 2>&1 || { echo "[test] no apt-get: cannot install ${apt_missing[*]}"; return 0; }
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq &&
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" ||
      echo "[test] apt-get could not install ${apt_missing[*]}"
  }
  set -m
  (apt_install) </dev/null >"$apt_log" 2>&1 &
  apt_pid=$!
  set +m
fi

step "cargo fmt --check; js/limits.mjs up to date (before any build regenerates it)"
cargo fmt --check
node scripts/gen-limits.mjs --check

# The native builds and the wasm test build lint what they compile:
# clippy-driver stands in for rustc on this crate's own targets, with
# warnings denied (scripts/lint-rustc.sh), so they need no check pass of
# their own. Not the deployment proofs: clippy-driver compiles without MIR
# optimisations, and they measure what users deploy.
lint=(env RUSTC_WORKSPACE_WRAPPER="$ROOT/scripts/lint-rustc.sh")

# The three release wasm builds (codegen-units=1 and LTO: a long single-threaded
# rustc) run in the background beside the native lints and tests, which use
# the debug profile: cargo locks each profile's build directory on its own,
# so neither waits for the other, and a 2-core machine keeps both cores busy.
# Their output is printed when they are awaited, before the end-to-end tests.
step "release wasm builds (in the background): lean and default deployment proofs, then the test build"
release_log=$(mktemp)
release() {
  local t0
  took() {
    awk -v a="$t0" -v b="$EPOCHREALTIME" -v s="$1" 'BEGIN { printf "[time] %s: %.1fs\n", s, b - a }'
    t0=$EPOCHREALTIME
  }
  t0=$EPOCHREALTIME
  # The lean wasm's 500 KiB bound: wrangler's [build] runs scripts/build.sh
  # with SHIITAKE_LEAN=1 (a release build without the default features).
  SHIITAKE_LEAN=1 node scripts/deploy-check.mjs
  took "lean deployment proof (SHIITAKE_LEAN=1 node scripts/deploy-check.mjs)"
  # The deployment proof (wrangler deploy --dry-run of the demo: production
  # build, bundle, bindings, SQLite migration). Before the test build:
  # wrangler's [build] leaves the production wasm in build/, which the test
  # build replaces.
  node scripts/deploy-check.mjs
  took "deployment proof (node scripts/deploy-check.mjs)"
  # The wasm and demo bundle the end-to-end tests run: with the
  # fault-injection hook, linted (the wasm32 library with that feature).
  SHIITAKE_TEST_BUILD=1 "${lint[@]}" bash scripts/build.sh
  took "test build (SHIITAKE_TEST_BUILD=1 bash scripts/build.sh)"
}
# A process group of its own (job control on for this one launch), so that
# a failing step stops all of it.
set -m
(set -e; export SHIITAKE_DENY_WARNINGS=1; release) </dev/null >"$release_log" 2>&1 &
release_pid=$!
set +m
# shellcheck disable=SC2064 # the pid and log are fixed now
stop_jobs() {
  local pid
  for pid in "$release_pid" $apt_pid; do kill -- -"$pid" 2>/dev/null || true; done
  rm -f "$release_log" ${apt_log:-}
}
trap 'rc=$?; stop_jobs; summary $rc' EXIT

# The wasm32 library with the default features is linted by the test build
# (the same code, with the fault-injection hook), and the deployment proofs
# deny compiler warnings (SHIITAKE_DENY_WARNINGS). Without them (the lean
# build) it is checked here.
step "cargo clippy (wasm32 library without the default features)"
cargo clippy --target wasm32-unknown-unknown --lib --no-default-features -- -D warnings

step "lean build (no default features): every target built and linted, the tests of what it refuses"
"${lint[@]}" cargo test --no-default-features --all-targets --no-run
# Only the targets that hold an `a_lean_build` test: running every test
# binary of the lean build would run nothing more.
lean_targets=(--lib)
for f in tests/*.rs; do
  grep -q 'fn a_lean_build' "$f" && lean_targets+=(--test "$(basename "$f" .rs)")
done
"${lint[@]}" cargo test --no-default-features "${lean_targets[@]}" a_lean_build
# Every unit test of the lean library.
"${lint[@]}" cargo test --no-default-features --lib

step "cargo test (every target built and linted)"
"${lint[@]}" cargo test --all-targets --no-run
"${lint[@]}" cargo test

step "release wasm builds (awaited)"
release_rc=0
wait "$release_pid" || release_rc=$?
cat "$release_log"
[ "$release_rc" -eq 0 ] || { echo "[test] the release wasm builds failed (exit $release_rc)" >&2; exit "$release_rc"; }

if [ -n "$apt_pid" ]; then
  step "apt-get install ${apt_missing[*]} (awaited)"
  wait "$apt_pid" || true
  cat "$apt_log"
  [ -x /usr/bin/chromium ] || echo "[test] no chromium: tests/e2e/ui-chromium.test.mjs and the chat page's tests will skip" >&2
  command -v tmux >/dev/null 2>&1 || { echo "[test] tmux is missing: tests/e2e/chat-cli.test.mjs needs it" >&2; exit 1; }
fi

step "end-to-end tests (scripts/e2e.sh: node --test, Miniflare, in lanes at once)"
bash scripts/e2e.sh
