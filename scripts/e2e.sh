#!/usr/bin/env bash
# The end-to-end step of the test command (scripts/test.sh; needs the wasm
# test build, `SHIITAKE_TEST_BUILD=1 bash scripts/build.sh`): every file of
# tests/e2e/ with node --test against the built wasm in Miniflare, the files
# that go through `execute` once more on the embedded sandbox, then a short
# run of the attack harness (scripts/attack/). The files run in lanes at
# once, each lane's output printed when it ends and its time with it; the
# first failing lane fails the step and stops the others.
#
# Lanes, sized so they end together on a 2-core machine (the step is bound
# by the machine's CPU, about 400 s of it, not by one lane):
#   independent  the files that share no port or state, three at a time;
#   deadlines 1, deadlines 2
#                the files that assert a deadline (a timeout, a heartbeat, a
#                CPU budget), one at a time in each lane;
#   embedded     the embedded sandbox's pass, two at a time, then the
#                attack harness.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

# A lane: `lane NAME CMD...` starts it in a process group of its own,
# `joined NAME` waits for it, prints its output and fails if it failed.
declare -A lane_pid lane_log
stop_lanes() {
  local pid
  for pid in "${lane_pid[@]}"; do kill -- -"$pid" 2>/dev/null || true; done
  rm -f "${lane_log[@]}"
}
trap stop_lanes EXIT
lane() {
  local name=$1
  shift
  lane_log[$name]=$(mktemp)
  set -m
  (
    # The job in a subshell of its own with errexit on, not in an `||` list
    # (where bash ignores errexit, and a failing file would neither stop
    # the lane nor fail it).
    t0=$EPOCHREALTIME
    set +e
    (set -e; "$@")
    rc=$?
    awk -v a="$t0" -v b="$EPOCHREALTIME" -v n="$name" 'BEGIN { printf "[time] lane %s: %.1fs\n", n, b - a }'
    exit "$rc"
  ) </dev/null >"${lane_log[$name]}" 2>&1 &
  lane_pid[$name]=$!
  set +m
}
joined() {
  local name=$1 rc=0
  wait "${lane_pid[$name]}" || rc=$?
  printf '\n==== lane %s: exit %s ====\n' "$name" "$rc"
  cat "${lane_log[$name]}"
  rm -f "${lane_log[$name]}"
  unset "lane_pid[$name]" "lane_log[$name]"
  [ "$rc" -eq 0 ] || { echo "[e2e] lane $name failed (exit $rc)" >&2; exit "$rc"; }
}

# The files that assert deadlines, in two lanes of about equal length (the
# seconds each took in a cold run beside the other lanes): never two of one
# lane at once. Both lanes held their deadlines beside the rest, with the
# machine's two cores fully busy.
deadlines1=(
  tests/e2e/chat-cli.test.mjs           # 49 s
  tests/e2e/mcp.test.mjs                # 28 s
  tests/e2e/trap.test.mjs               # 10 s
  tests/e2e/run.test.mjs                # 8 s
  tests/e2e/alarm.test.mjs              # 6 s
  tests/e2e/mcp-conformance.test.mjs    # 6 s
  tests/e2e/computer-transport.test.mjs # 2 s
  tests/e2e/owner-api.test.mjs          # 2 s
)
deadlines2=(
  tests/e2e/host-jobs.test.mjs          # 32 s
  tests/e2e/ui-bridge.test.mjs          # 11 s
  tests/e2e/tools-config.test.mjs       # 9 s
  tests/e2e/sandbox-embedded.test.mjs   # 9 s
  tests/e2e/sandbox-do.test.mjs         # 7 s
  tests/e2e/sandbox-abuse.test.mjs      # 4 s
  tests/e2e/execute-harness.test.mjs
)
# The tests that go through `execute` in a Durable Object, again with their
# Workers (fixtures and the demo) bundled with the engine and served without
# LOADER (tests/e2e/helpers.mjs SANDBOX): the same tests on the other backend
# (the Worker Loader pass is the other lanes'). The two that assert
# deadlines (ui-bridge, sandbox-abuse) run in the second deadline lane.
embedded=(
  tests/e2e/tools.test.mjs tests/e2e/tool-events.test.mjs tests/e2e/tools-recovery.test.mjs
  tests/e2e/tool-closure.test.mjs tests/e2e/computers.test.mjs tests/e2e/fleet.test.mjs
  tests/e2e/fleet-forgery.test.mjs tests/e2e/fleet-directory.test.mjs tests/e2e/extensions.test.mjs
  tests/e2e/files-grant.test.mjs tests/e2e/models.test.mjs tests/e2e/mcp.test.mjs
  tests/e2e/tools-config.test.mjs tests/e2e/ui-chromium.test.mjs tests/e2e/ui-browser.test.mjs
  tests/e2e/acp.test.mjs tests/e2e/openapi.test.mjs tests/e2e/anthropic.test.mjs tests/e2e/files.test.mjs
)
independent=()
shopt -s globstar
for f in tests/e2e/**/*.test.mjs; do
  [[ " ${deadlines1[*]} ${deadlines2[*]} " == *" $f "* ]] || independent+=("$f")
done

deadlines_2() {
  node --test --test-concurrency=1 "${deadlines2[@]}"
  SHIITAKE_TEST_SANDBOX=embedded node --test --test-concurrency=1 tests/e2e/ui-bridge.test.mjs tests/e2e/sandbox-abuse.test.mjs
}
# The attack harness (crash, fuzz, races: scripts/attack/all.mjs) runs its
# own Workers and holds each script to its time bound: it runs after the
# embedded pass, when the machine has room (started with the other lanes,
# its fuzzer overran its 120 s bound).
embedded_then_attack() {
  SHIITAKE_TEST_SANDBOX=embedded node --test --test-concurrency=2 "${embedded[@]}"
  node scripts/attack/all.mjs --short
}
lane deadlines1 node --test --test-concurrency=1 "${deadlines1[@]}"
lane deadlines2 deadlines_2
lane embedded embedded_then_attack
lane independent node --test --test-concurrency=3 "${independent[@]}"
joined independent
joined deadlines1
joined deadlines2
joined embedded
