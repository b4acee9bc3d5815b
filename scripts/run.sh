#!/usr/bin/env bash
# Serves the demo Worker locally: wrangler dev on 127.0.0.1, Durable Object
# state (SQLite, alarms) kept under $SHIITAKE_STATE_DIR across restarts.
# wrangler runs scripts/build.sh first (wrangler.toml [build]) and again when
# src/ changes.
#
#   PORT                   default 8787
#   SHIITAKE_STATE_DIR     default .state/
#   SHIITAKE_TOKEN         bearer token of /agents/*; default `dev-token`,
#                          a well-known value for local use only
#   SHIITAKE_MODEL         default openai/scripted
#   OPENAI_BASE_URL, OPENAI_API_KEY, SHIITAKE_INSTRUCTIONS,
#   SHIITAKE_TOOL_TIMEOUT_MS, SHIITAKE_BUDGET_SESSION_TOKENS,
#   SHIITAKE_BUDGET_DAILY_TOKENS, SHIITAKE_MCP_ALLOWED_HOSTS   passed when set
#   SHIITAKE_DEMO_GOAL     default 1: the demo Agent runs the goal example
#                          extension (the chat page shows its chip, row and
#                          lines); 0 runs none
#   SHIITAKE_DEMO_LINKS    default 1: the demo Agent runs the links example
#                          extension (pinned rows that open related Sessions)
#   SHIITAKE_MCP_SERVERS   a JSON array of MCP servers {name, url, headers?}
#                          for the demo Agent (a secret: never printed)
#   MODEL_PORT             when OPENAI_BASE_URL is unset, the scripted model
#                          server (tests/support/model-server.mjs, echo
#                          answers) runs on 127.0.0.1:MODEL_PORT for as long
#                          as wrangler does; default PORT+1
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

port="${PORT:-8787}"
state_dir="${SHIITAKE_STATE_DIR:-$ROOT/.state}"
token="${SHIITAKE_TOKEN:-dev-token}"
model="${SHIITAKE_MODEL:-openai/scripted}"
url="http://127.0.0.1:$port"

args=(dev --local --ip 127.0.0.1 --port "$port" --persist-to "$state_dir"
  --show-interactive-dev-session=false
  --var "SHIITAKE_TOKEN:$token" --var "SHIITAKE_MODEL:$model"
  --var "SHIITAKE_DEMO_GOAL:${SHIITAKE_DEMO_GOAL:-1}" --var "SHIITAKE_DEMO_LINKS:${SHIITAKE_DEMO_LINKS:-1}")
[ -n "${SHIITAKE_INSTRUCTIONS:-}" ] && args+=(--var "SHIITAKE_INSTRUCTIONS:$SHIITAKE_INSTRUCTIONS")
[ -n "${SHIITAKE_TOOL_TIMEOUT_MS:-}" ] && args+=(--var "SHIITAKE_TOOL_TIMEOUT_MS:$SHIITAKE_TOOL_TIMEOUT_MS")
[ -n "${SHIITAKE_BUDGET_SESSION_TOKENS:-}" ] && args+=(--var "SHIITAKE_BUDGET_SESSION_TOKENS:$SHIITAKE_BUDGET_SESSION_TOKENS")
[ -n "${SHIITAKE_BUDGET_DAILY_TOKENS:-}" ] && args+=(--var "SHIITAKE_BUDGET_DAILY_TOKENS:$SHIITAKE_BUDGET_DAILY_TOKENS")
[ -n "${SHIITAKE_MCP_ALLOWED_HOSTS:-}" ] && args+=(--var "SHIITAKE_MCP_ALLOWED_HOSTS:$SHIITAKE_MCP_ALLOWED_HOSTS")

run_dir="$(mktemp -d)" # private (0700): the key file, the model server's URL
model_pid=""
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  if [ -n "$model_pid" ]; then kill -TERM "$model_pid" 2>/dev/null || true; fi
  rm -rf "$run_dir"
}
trap cleanup EXIT

# No provider given: serve the scripted model server so prompts get answers.
if [ -n "${OPENAI_BASE_URL:-}" ]; then
  model_url="$OPENAI_BASE_URL"
  model_line="model: $model at $model_url"
else
  model_port="${MODEL_PORT:-$((port + 1))}"
  # It prints its base URL once it listens.
  node tests/support/model-server.mjs --port "$model_port" >"$run_dir/model.url" &
  model_pid=$!
  for _ in $(seq 1 100); do
    [ -s "$run_dir/model.url" ] && break
    kill -0 "$model_pid" 2>/dev/null || break
    sleep 0.1
  done
  model_url="$(head -n 1 "$run_dir/model.url")"
  if [ -z "$model_url" ]; then
    echo "run: the scripted model server did not start on 127.0.0.1:$model_port (port taken? set MODEL_PORT)" >&2
    exit 1
  fi
  model_line="model: $model at $model_url, the scripted model server (echo answers; set OPENAI_BASE_URL for a real provider)"
fi
args+=(--var "OPENAI_BASE_URL:$model_url")
# Secrets (the provider key; SHIITAKE_MCP_SERVERS, whose header values are
# credentials) go through a private env file rather than --var, so they show
# neither in the process list nor in wrangler's bindings table, and never in
# wrangler.toml.
secrets=()
for name in OPENAI_API_KEY SHIITAKE_MCP_SERVERS; do
  value="${!name:-}"
  [ -n "$value" ] || continue
  case "$value" in
    *"'"* | *$'\n'*) echo "run: $name must not contain a single quote or a newline" >&2; exit 1 ;;
  esac
  secrets+=("$name='$value'")
done
if [ "${#secrets[@]}" -gt 0 ]; then
  (umask 077 && printf '%s\n' "${secrets[@]}" >"$run_dir/secrets.env")
  args+=(--env-file "$run_dir/secrets.env")
fi

banner() {
  auth="-H 'authorization: Bearer $token' -H 'content-type: application/json'"
  cat <<EOF

  shiitake-demo is serving $url  (state: $state_dir)
  token (local only): $token
  $model_line

  chat page:     $url/  (token: $token)
  chat with it:  npx shiitake chat --url $url --token $token

  curl -s -X POST $url/agents/demo/sessions $auth -d '{"sessionId":"hello"}'
  curl -s -X POST $url/agents/demo/sessions/hello/commands $auth \\
       -d '{"type":"prompt","requestId":"r1","text":"Hello!"}'
  curl -s "$url/agents/demo/sessions/hello/settlement?commandId=<commandId>&timeoutMs=30000" $auth
  curl -s $url/agents/demo/sessions/hello $auth

EOF
}

export WRANGLER_SEND_METRICS=false
node_modules/.bin/wrangler "${args[@]}" &
child=$!
# Stopping this script stops wrangler (and its workerd) with it.
trap 'kill -TERM "$child" 2>/dev/null || true' INT TERM

# Print the usage once the server answers, below wrangler's start-up lines.
for _ in $(seq 1 600); do
  kill -0 "$child" 2>/dev/null || break
  if node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$url/" 2>/dev/null; then
    banner
    break
  fi
  sleep 0.5
done

status=0
wait "$child" || status=$?
# A signal interrupts the first wait while wrangler is still shutting down.
while kill -0 "$child" 2>/dev/null; do wait "$child" || status=$?; done
exit "$status"
