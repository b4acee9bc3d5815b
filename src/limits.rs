//! Every bound the runtime enforces, in one place (TIGER_STYLE: a limit on
//! everything, units last). `docs/http.md` states the same numbers to users;
//! the JS side imports them from `js/limits.mjs`, generated from this file by
//! `scripts/gen-limits.mjs` (checked by `tests/e2e/limits-sync.test.mjs`).

/// Largest request body the HTTP layer reads.
pub const BODY_BYTES_MAX: usize = 1_048_576;
/// Caller request ids: non-empty, at most this many UTF-8 bytes (seed).
pub const REQUEST_ID_BYTES_MAX: usize = 256;
/// Session ids: at most this many bytes of `[A-Za-z0-9._:-]`.
pub const SESSION_ID_BYTES_MAX: usize = 128;
/// Prompt and operator text.
pub const TEXT_BYTES_MAX: usize = 65_536;
/// Images attached to one prompt.
pub const IMAGES_PER_PROMPT_MAX: usize = 4;
/// Prompts waiting in one Session's queue.
pub const PENDING_PER_SESSION_MAX: usize = 64;
/// Bytes of stored input (text + images) waiting in one Session's queue.
pub const PENDING_BYTES_PER_SESSION_MAX: usize = 2_097_152;
/// Sessions one Agent (one Durable Object) holds.
pub const SESSIONS_PER_AGENT_MAX: usize = 10_000;
/// Withdrawal fences one Session holds.
pub const FENCES_PER_SESSION_MAX: usize = 4_096;
/// Branches one Session's messages start (edits, retries, the first
/// message written after a `select`), checked when a `retry`, a prompt with
/// `after` or a `select` is admitted (queued ones may pass it by at most
/// the queue's bound). Bounds the fork points a `select` and a fork's
/// ancestry read (one index entry each).
pub const BRANCHES_PER_SESSION_MAX: usize = 10_000;
/// Sessions in one fork chain (a fork, its base, the base's base...): a
/// path read steps into each at most once.
pub const FORK_DEPTH_MAX: usize = 16;
/// Host metadata attached to one entry, as JSON (seed: 4096 bytes).
pub const META_BYTES_MAX: usize = 4_096;
/// Messages in one Session read page (seed: at most 200).
pub const READ_PAGE_MESSAGES_MAX: usize = 200;
/// Default page size for Session reads and Session lists.
pub const PAGE_LIMIT_DEFAULT: usize = 50;
/// Bytes of message payload in one Session read page; a page always holds at
/// least one message so a reader can make progress.
pub const READ_PAGE_BYTES_MAX: usize = 1_048_576;
/// Messages of the transcript one model call sees (the newest).
pub const CONTEXT_MESSAGES_MAX: usize = 200;
/// Bytes of stored messages (their JSON bodies) one model context is built
/// from; past it the oldest whole turns are left out (`src/run/context.rs`).
/// 4 MiB of text is roughly a million tokens, the largest provider windows,
/// while the bodies, their parsed form and the provider request built from
/// them (about three copies) stay a tenth of a 128 MiB Worker.
pub const CONTEXT_BYTES_MAX: usize = 4_194_304;
/// Sessions in one list page.
pub const LIST_PAGE_SESSIONS_MAX: usize = 200;

// Compaction (`src/run/compaction.rs`): a summary stands for the messages
// before it in every later model context.

/// Bytes of a compaction's summary; a longer answer is cut (ending in `…`).
/// About 8,000 tokens: a summary is a fraction of any window.
pub const COMPACTION_SUMMARY_BYTES_MAX: usize = 32_768;
/// Bytes of the transcript a summary call is sent (the previous summary,
/// then the newest messages that fit; without a context window stated).
/// With one, at most half the window (at `CONTEXT_BYTES_PER_TOKEN`).
pub const COMPACTION_INPUT_BYTES_MAX: usize = 524_288;
/// Bytes of one message in a summary call's transcript: a longer one keeps
/// its start and its end (a tool's 20 KiB output reads as about 4 KiB).
pub const COMPACTION_MESSAGE_BYTES_MAX: usize = 4_096;
/// Bytes of the host's compaction prompt.
pub const COMPACTION_PROMPT_BYTES_MAX: usize = 16_384;
/// Default trigger: a turn compacts before a model call whose estimated
/// input passes this percentage of the model's stated context window.
pub const COMPACTION_TRIGGER_PERCENT_DEFAULT: u64 = 80;
/// The trigger a host may state, in percent of the window.
pub const COMPACTION_TRIGGER_PERCENT_MIN: u64 = 10;
pub const COMPACTION_TRIGGER_PERCENT_MAX: u64 = 100;
/// A model's stated context window, in tokens.
pub const CONTEXT_WINDOW_TOKENS_MIN: u64 = 1_024;
pub const CONTEXT_WINDOW_TOKENS_MAX: u64 = 100_000_000;
/// The estimate of a context's input tokens: bytes of model-visible text
/// (and tool-call arguments) per token, and tokens per image.
pub const CONTEXT_BYTES_PER_TOKEN: u64 = 4;
pub const CONTEXT_IMAGE_TOKENS: u64 = 1_600;
/// Bytes of one streamed model answer: its text plus every tool call's id,
/// name and arguments. Past it the call fails for good.
pub const ANSWER_BYTES_MAX: usize = 1_048_576;
/// Tool calls one model step may ask for.
pub const TOOL_CALLS_PER_STEP_MAX: usize = 64;
/// Model steps that call tools in one turn; asking for tools once more
/// settles the turn `failed`.
pub const TOOL_STEPS_PER_TURN_MAX: u32 = 32;
/// A tool call id the model chose; a longer (or non-`[A-Za-z0-9_-]`, or
/// repeated) one is replaced by `call_<n>`.
pub const TOOL_CALL_ID_BYTES_MAX: usize = 64;
/// Bytes of one line of an event stream (a model provider's, an MCP
/// server's), and of one event's data.
pub const SSE_LINE_BYTES_MAX: usize = 1_048_576;
/// Bytes of a model-call diagnostic (it reaches storage, watchers and logs).
pub const DIAGNOSTIC_BYTES_MAX: usize = 1_024;
/// Bytes of the provider's own usage object kept in the usage ledger beside
/// the normalised counts; a longer one is dropped whole (flagged), never cut
/// mid-JSON.
pub const USAGE_RAW_BYTES_MAX: usize = 2_048;
/// The largest token budget a route or the configuration sets (below 2^53,
/// so it crosses JSON and JS numbers exactly).
pub const BUDGET_TOKENS_MAX: u64 = 1_000_000_000_000_000;
/// Bytes of the group key a usage ledger cursor carries (a Session id, a
/// `provider/model` address, a day): a longer cursor is not one this API
/// returned.
pub const USAGE_CURSOR_KEY_BYTES_MAX: usize = 512;
/// A run of at least this many bytes of a configured secret (an API key, a
/// token in an MCP header) is redacted wherever provider or server text
/// echoes it (`src/redact.rs`): whole, after `Bearer `, or cut.
pub const SECRET_FRAGMENT_BYTES_MIN: usize = 8;
/// Longest settlement long poll (seed: bounded to 30,000 ms).
pub const SETTLEMENT_TIMEOUT_MS_MAX: u64 = 30_000;
/// Open watch streams per Session, and per Agent.
pub const WATCHERS_PER_SESSION_MAX: usize = 16;
pub const WATCHERS_MAX: usize = 256;
/// How often an open event stream gets an SSE comment. The runtime learns of a client that went away only when a write
/// fails, so this bounds how long a closed watch on an idle Session holds
/// its place; it also keeps proxies from cutting an idle stream (Cloudflare
/// closes a response idle for 100 s). `SHIITAKE_WATCH_HEARTBEAT_MS` may
/// lower it.
pub const WATCH_HEARTBEAT_MS: u64 = 15_000;
/// Frames, and bytes, a watcher may fall behind before it is reset with a
/// snapshot (a frame can carry a whole answer, so both are bounded).
pub const WATCH_BACKLOG_FRAMES_MAX: usize = 256;
pub const WATCH_BACKLOG_BYTES_MAX: usize = 4_194_304;
/// Settlement long polls parked at once per Agent.
pub const WAITERS_MAX: usize = 1_024;

// Capabilities (`src/capability/`): what an Agent's guest code may call.
/// Capability modules one Agent offers.
pub const MODULES_PER_AGENT_MAX: usize = 64;
/// Operations one capability module offers.
pub const OPERATIONS_PER_MODULE_MAX: usize = 256;
/// A module id (`mcp.notes`): at most this many bytes.
pub const MODULE_ID_BYTES_MAX: usize = 64;
/// An operation's source name (`create-note`): 1 to this many bytes.
pub const OPERATION_NAME_BYTES_MAX: usize = 128;
/// An operation's description; a longer one is cut at a character boundary.
pub const OPERATION_DESCRIPTION_BYTES_MAX: usize = 4_096;
/// One operation's input JSON Schema, as compact JSON.
pub const SCHEMA_BYTES_MAX: usize = 65_536;
/// Nested schema levels (object properties, array items) one input schema
/// may have; the top level is level 1.
pub const SCHEMA_DEPTH_MAX: usize = 32;
/// Descriptions and input schemas of one module's operations, together.
pub const MODULE_BYTES_MAX: usize = 1_048_576;
/// Argument errors one check reports (the first ones found).
pub const SCHEMA_ERRORS_MAX: usize = 8;
/// Bytes of one such error; a longer one (a huge property name) is cut.
pub const SCHEMA_ERROR_BYTES_MAX: usize = 512;
/// Results of one capability search, and the query tokens it reads.
pub const SEARCH_RESULTS_MAX: usize = 20;
pub const SEARCH_QUERY_TOKENS_MAX: usize = 16;
/// Nesting of a JSON value crossing the capability boundary (tool arguments
/// and results, schemas): arrays and objects, a scalar is depth 0.
pub const JSON_DEPTH_MAX: usize = 64;
/// Tool arguments, and tool results, as JSON.
pub const TOOL_PAYLOAD_BYTES_MAX: usize = 262_144;

// MCP client (`src/mcp/`): one connection to one MCP server.
/// Bytes of one MCP HTTP response body (JSON or the whole event stream).
pub const MCP_RESPONSE_BYTES_MAX: usize = 4_194_304;
/// `tools/list` pages one listing reads, and tools it accepts in all.
pub const MCP_TOOLS_PAGES_MAX: usize = 20;
pub const MCP_TOOLS_MAX: usize = 1_000;
/// A JSON-RPC error message from a server, as reported; a longer one is cut.
pub const MCP_RPC_ERROR_BYTES_MAX: usize = 1_024;
/// MCP servers one Agent connects.
pub const MCP_SERVERS_MAX: usize = 16;
/// Connecting to one MCP server and listing its tools (all servers at
/// once); the host may set less (`tools().mcpTimeoutMs`).
pub const MCP_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// An unavailable MCP server is tried again at the first turn this long
/// after it failed (the host may set 1 s to `MCP_RETRY_MS_MAX`,
/// `tools().mcpRetryMs`).
pub const MCP_RETRY_MS: u64 = 60_000;
pub const MCP_RETRY_MS_MAX: u64 = 3_600_000;
/// An `Mcp-Session-Id` a server assigns (visible ASCII).
pub const MCP_SESSION_ID_BYTES_MAX: usize = 256;
/// A tool call's event stream that ends without the call's response is
/// resumed (a GET with `Last-Event-ID`, SEP-1699) at most this many times
/// per call; each resumption waits the stream's `retry:` (at most
/// `MCP_SSE_RETRY_MS_MAX`), or `MCP_SSE_RETRY_MS` when it gave none. An
/// event id longer than `MCP_EVENT_ID_BYTES_MAX` (or not visible ASCII)
/// makes the stream not resumable.
pub const MCP_SSE_RESUMES_MAX: usize = 16;
pub const MCP_SSE_RETRY_MS: u64 = 1_000;
pub const MCP_SSE_RETRY_MS_MAX: u64 = 30_000;
pub const MCP_EVENT_ID_BYTES_MAX: usize = 256;
/// Requests a server sends on one tool call's stream that the client
/// answers (`ping`, or a JSON-RPC error for a capability it does not
/// declare); past it they are left unanswered (a server flooding them
/// costs at most this many POSTs a call).
pub const MCP_SERVER_REQUESTS_MAX: usize = 16;
/// A connected MCP server is listed again at most once this often after it
/// told of a change (`notifications/tools/list_changed`) or its session was
/// renewed: a server notifying on every response costs one listing a
/// second, not one a turn.
pub const MCP_RELIST_GAP_MS: i64 = 1_000;
/// Tools of one MCP server (or of the host's own) reported one by one when
/// left out; past it the last report counts the rest.
pub const TOOL_REPORTS_MAX: usize = 8;

/// Host names `SHIITAKE_MCP_ALLOWED_HOSTS` lists (an Agent's `/mcp`).
pub const MCP_ALLOWED_HOSTS_MAX: usize = 32;

// The `execute` door and tool calls (`src/capability/door.rs`, `src/host/tools.rs`).
/// Bytes of the `execute` tool's description (the operation list is cut).
pub const EXECUTE_DESCRIPTION_BYTES_MAX: usize = 8_192;
/// Wall time of one `execute` run or direct tool call ...
pub const TOOL_CALL_TIMEOUT_MS: u64 = 180_000;
/// ... after which its abort signal fires and it gets this long to end.
pub const TOOL_ABORT_GRACE_MS: u64 = 5_000;
/// `execute` runs at once in one Agent (Durable Object); one more is refused.
pub const EXECUTIONS_CONCURRENT_MAX: usize = 8;
/// Operation calls (and `forage` calls) one `execute` run may make.
pub const GUEST_CALLS_PER_EXECUTION_MAX: usize = 1_024;
/// The embedded `execute` sandbox (`js/sandbox/embedded.mjs`, QuickJS in
/// wasm, in the host's own thread): the engine's whole linear memory, which
/// starts at 16 MiB (the build's minimum) and is shared by the runs of one
/// Agent in flight; an allocation past it fails ("out of memory"). QuickJS's
/// own heap limit is no bound in this build (without `malloc_usable_size` it
/// counts 8 bytes an allocation), so the memory itself is capped ...
pub const GUEST_MEMORY_BYTES_MAX: usize = 33_554_432;
/// ... the engine's stack for one run: deeper recursion is a "stack overflow"
/// error. At 128 KiB a built-in's recursion (`JSON.stringify` of a deeply
/// nested array) overflowed Node's native stack before the engine's check.
pub const GUEST_STACK_BYTES_MAX: usize = 65_536;
/// ... and the time one run may compute, summed over its slices between
/// host calls (a computing guest holds the Agent's thread).
pub const GUEST_CPU_MS_MAX: u64 = 5_000;
/// Timers (`setTimeout`) one embedded run may start.
pub const GUEST_TIMERS_MAX: usize = 1_024;
/// While a tool runs, the alarm is kept armed this far ahead (seed: the
/// five-second heartbeat), so a crash resumes the turn within about this.
pub const TOOL_HEARTBEAT_MS: u64 = 5_000;
/// A running call's progress frames (`tool` frames, phase `progress`): at
/// most one per this many milliseconds per call; reports in between are
/// coalesced, the newest published when the interval ends (or with the
/// call's end).
pub const TOOL_PROGRESS_INTERVAL_MS: i64 = 100;
/// Bytes of one progress report's `data`, as JSON; a larger one is refused
/// to the tool (`ctx.progress` throws).
pub const TOOL_PROGRESS_BYTES_MAX: usize = 4_096;
/// Images one tool result carries to the model, and bytes of their base64
/// data in all; a result past either is an error result.
pub const TOOL_RESULT_IMAGES_MAX: usize = 4;
pub const TOOL_RESULT_IMAGE_BYTES_MAX: usize = 1_048_576;

// The run loop and the model call (the wasm host enforces these).

/// How long one alarm invocation keeps claiming new turns; the next alarm
/// continues (an alarm handler must end well inside the platform's limit).
pub const LOOP_CLAIM_BUDGET_MS: i64 = 600_000;
/// Longest sleep of the run loop between checks while turns run.
pub const LOOP_NAP_MS_MAX: i64 = 60_000;
/// One model call's wall time.
pub const MODEL_CALL_TIMEOUT_MS: u64 = 300_000;
/// Bytes of a failed model call's body read for its diagnostic.
pub const MODEL_ERROR_BODY_BYTES_MAX: usize = 65_536;
/// Output tokens asked of the model per call unless
/// `SHIITAKE_MAX_OUTPUT_TOKENS` says otherwise.
pub const MAX_OUTPUT_TOKENS_DEFAULT: u32 = 4_096;
/// Calls a turn keeps tied to its stop signal at once (calls of a turn run
/// one at a time; older, finished ones are let go).
pub const ADOPTED_CALLS_MAX: usize = 8;
/// Most turns one reconciliation pass claims; the next pass takes the rest.
pub const CLAIMS_PER_PASS_MAX: usize = 64;

// Model calls and their retries (seed: retries are durable timers).

/// Tools offered in one model request.
pub const TOOLS_PER_REQUEST_MAX: usize = 64;
/// Bytes of a tool name (both providers' rule: `^[a-zA-Z0-9_-]{1,64}$`).
pub const TOOL_NAME_BYTES_MAX: usize = 64;
/// Model-call attempts per turn, restarts included, unless
/// `SHIITAKE_ATTEMPTS_MAX` (at most `ATTEMPTS_MAX`) says otherwise.
pub const ATTEMPTS_MAX_DEFAULT: u32 = 10;
pub const ATTEMPTS_MAX: u64 = 100;
/// The first retry's delay; each next one doubles, up to the cap.
pub const RETRY_BASE_MS_DEFAULT: u64 = 3_000;
pub const RETRY_BASE_MS_MAX: u64 = 600_000;
/// The cap of the retry delay.
pub const RETRY_MAX_MS_DEFAULT: u64 = 60_000;
pub const RETRY_MAX_MS_MAX: u64 = 3_600_000;
/// `SHIITAKE_MAX_OUTPUT_TOKENS` at most.
pub const MAX_OUTPUT_TOKENS_MAX: u64 = 1_000_000;
/// The shortest MCP retry interval a host may configure.
pub const MCP_RETRY_MS_MIN: u64 = 1_000;

// Grants.

/// Keys in one grant map.
pub const GRANT_KEYS_MAX: usize = 64;
/// Bytes of one grant key (a module id).
pub const GRANT_KEY_BYTES_MAX: usize = 64;
/// Versions are JSON-safe integers.
pub const GRANT_VERSION_MAX: u64 = 9_007_199_254_740_991;

// Schema error messages.

/// Enum values, or property names, one schema error message lists.
pub const LISTED_MAX: usize = 20;

// Files (`src/files/`, knapsack: Knapsack.files, apply_patch, files-search).

/// Bytes of one file path (R2's key bound), and its components at most.
pub const FILE_PATH_BYTES_MAX: usize = 1_024;
pub const FILE_PATH_DEPTH_MAX: usize = 32;
/// Bytes of file content one `files.read` returns (cut at a line end; the
/// model reads on with `startLine`), under the tool result bound.
pub const FILE_READ_BYTES_MAX: usize = 131_072;
/// Bytes of a file the files module writes, replaces or patches.
pub const FILE_BYTES_MAX: usize = 4_194_304;
/// Files one patch may touch.
pub const PATCH_FILES_MAX: usize = 64;
/// Hunks of one patch, all files together.
pub const PATCH_HUNKS_MAX: usize = 1_024;
/// Characters (code points) of one patch text: the apply_patch input
/// schema's `maxLength` (`schemas/files-patch.input.json`).
pub const PATCH_CHARS_MAX: usize = 262_144;
/// Line comparisons (and lines hashed for comparing) one patch's context
/// matching may make, all files together: a patch of ambiguous context on
/// large files fails instead of running long.
pub const PATCH_MATCH_STEPS_MAX: usize = 67_108_864;
/// Bytes of a patch's lines quoted in its error message.
pub const PATCH_EXCERPT_BYTES_MAX: usize = 240;
/// Entries one `files.list` page returns.
pub const LIST_ENTRIES_MAX: usize = 1_000;
/// Files one `files.search` looks at, and bytes it reads in all.
pub const SEARCH_FILES_MAX: usize = 10_000;
pub const SEARCH_SCAN_BYTES_MAX: usize = 67_108_864;
/// Matches one `files.search` returns, and bytes of a matching line shown.
pub const SEARCH_MATCHES_MAX: usize = 200;
pub const SEARCH_LINE_BYTES_MAX: usize = 512;
/// Bytes of one `files.search` query, and of the regex compiled from it
/// (the program, and separately its lazy DFA's cache).
pub const FILES_SEARCH_QUERY_BYTES_MAX: usize = 1_024;
pub const FILES_SEARCH_REGEX_BYTES_MAX: usize = 1_048_576;
/// Ignore files (`.gitignore`) one search policy reads, bytes of each, and
/// bytes of all together (files-search: adapters supply bounded text).
pub const IGNORE_FILES_MAX: usize = 256;
pub const IGNORE_FILE_BYTES_MAX: usize = 65_536;
pub const IGNORE_BYTES_MAX: usize = 1_048_576;
/// The SQLite workspace's defaults: bytes of one file, of all files, and
/// files in all (a host may set less).
pub const WORKSPACE_FILE_BYTES_MAX: usize = 1_048_576;
pub const WORKSPACE_BYTES_MAX: usize = 67_108_864;
pub const WORKSPACE_FILES_MAX: usize = 10_000;
/// Bytes of the files one patch over a stepwise port (R2) rewrites or
/// deletes, all together: the patch journal keeps their content in the
/// Agent's SQLite until the patch is written or undone (`files::journal`).
/// A bigger patch is refused before any write. (Without it the bound would
/// be `PATCH_FILES_MAX` x `FILE_BYTES_MAX`, 256 MiB.)
pub const FILES_JOURNAL_BYTES_MAX: usize = 16_777_216;
/// Bytes of one part of a journaled file's content: a Durable Object's
/// SQLite holds at most 2 MB in one value, and a file up to 4 MiB.
pub const FILES_JOURNAL_PART_BYTES: usize = 1_048_576;

// Computers (`src/computer/`, knapsack: Knapsack.computer, Knapsack.computers).
/// Bytes of one Computer's advertisement, as JSON text.
pub const COMPUTER_ADVERTISEMENT_BYTES_MAX: usize = 262_144;
/// Computers one host lists.
pub const COMPUTERS_MAX: usize = 32;
/// A Computer connection's id (its stable identity): 1 to this many bytes.
pub const COMPUTER_ID_BYTES_MAX: usize = 128;
/// A Computer's name: 1 to this many bytes, so that both its module
/// `computers.<name>` and its files module `computers.<name>.files` stay
/// within `MODULE_ID_BYTES_MAX` (64 - `computers.` - `.files`).
pub const COMPUTER_NAME_BYTES_MAX: usize = 48;
/// Describing one Computer (all at once); past it the Computer is dropped
/// and reported.
pub const COMPUTER_DESCRIBE_TIMEOUT_MS: u64 = 10_000;
/// Bytes of one Computer HTTP response body (`advertise`, `call`); the
/// transport reads one more byte to tell an oversized body.
pub const COMPUTER_RESPONSE_BYTES_MAX: usize = 4_194_304;

// Extensions (`src/extension/`, seed: "Extensions and authority"). The
// JS authoring library (`js/extensions.mjs`) checks the definition bounds
// too, at definition time.
/// Extensions in one Agent's roster.
pub const EXTENSIONS_MAX: usize = 16;
/// Collections (documents included) one extension declares.
pub const EXTENSION_COLLECTIONS_MAX: usize = 16;
/// Commands one extension declares.
pub const EXTENSION_COMMANDS_MAX: usize = 32;
/// Rows in one collection.
pub const EXTENSION_ROWS_PER_COLLECTION_MAX: usize = 1_000;
/// Bytes of one row, as JSON.
pub const EXTENSION_ROW_BYTES_MAX: usize = 16_384;
/// Bytes of one extension's whole state (keys and rows as JSON): what a
/// hook call is handed.
pub const EXTENSION_STATE_BYTES_MAX: usize = 1_048_576;
/// Bytes of one row key.
pub const EXTENSION_KEY_BYTES_MAX: usize = 256;
/// Timers one extension holds at once.
pub const EXTENSION_TIMERS_MAX: usize = 64;
/// Bytes of one timer's payload, as JSON.
pub const EXTENSION_TIMER_PAYLOAD_BYTES_MAX: usize = 16_384;
/// Bytes of one projection value, as JSON.
pub const EXTENSION_PROJECTION_BYTES_MAX: usize = 16_384;
/// Bytes of one command's input and of its result, as JSON.
pub const EXTENSION_COMMAND_BYTES_MAX: usize = 65_536;
/// Prompts one command or timer call sends (at most one per Session).
pub const EXTENSION_SENDS_PER_CALL_MAX: usize = 8;
/// Bytes of the prompt sections one extension adds to a model call.
pub const EXTENSION_PROMPT_BYTES_MAX: usize = 16_384;
/// Bytes of a recorded stop reason (a hook's error, cut).
pub const EXTENSION_STOP_REASON_BYTES_MAX: usize = 1_024;
/// Extension projections an instance remembers as published (extensions
/// x watched Sessions), so an unchanged one is not sent again; past it all
/// are forgotten and sent again once (`observe::Projections`).
pub const PROJECTIONS_PUBLISHED_MAX: usize = 4_096;
/// Highest state version a definition declares.
pub const EXTENSION_STATE_VERSION_MAX: u32 = 1_000;
/// Bytes of one definition's manifest, as JSON.
pub const EXTENSION_MANIFEST_BYTES_MAX: usize = 262_144;
/// Bytes of one answer of the authoring host (a hook call's writes).
pub const EXTENSION_ANSWER_BYTES_MAX: usize = 4_194_304;
/// Missed settlements one catch-up transition replays.
pub const EXTENSION_REPLAY_PER_PASS_MAX: usize = 64;
/// Due timers one pass fires (each in its own transition).
pub const EXTENSION_TIMERS_PER_PASS_MAX: usize = 16;
/// Command request ids one extension remembers for replay (the newest).
pub const EXTENSION_REQUESTS_KEPT_MAX: usize = 10_000;
/// Producer history events one extension retains per Session (the newest;
/// older ones are counted as omitted).
pub const EXTENSION_HISTORY_EVENTS_MAX: usize = 32;
/// Bytes of one extension's retained history of a Session (its events'
/// values as JSON).
pub const EXTENSION_HISTORY_BYTES_MAX: usize = 32_768;
/// Milliseconds the shim awaits one extension's activation disposer when
/// its instance closes (`js/do/hooks.mjs`); past it the close goes on and
/// the disposer is logged as overdue.
pub const EXTENSION_DISPOSE_TIMEOUT_MS: u64 = 5_000;

// Client entries v1 (`js/client-entry.mjs`, seed: "Client entries"): what
// one entry's `contribute` may return, checked by the client host.
/// Chips in one contribution.
pub const CLIENT_CHIPS_MAX: usize = 4;
/// Pinned panel rows in one contribution.
pub const CLIENT_PANEL_ROWS_MAX: usize = 16;
/// Timeline cells in one contribution.
pub const CLIENT_TIMELINE_CELLS_MAX: usize = 32;
/// Rows one entry shows across its slots (chips, panel rows, cells, waiting).
pub const CLIENT_ROWS_MAX: usize = 200;
/// Characters (code points) of one label.
pub const CLIENT_LABEL_CHARS_MAX: usize = 4_096;

// Attention (seed: "Extensions and authority") and its delivery
// (`src/delivery.rs`, the host's work lane, seed: `hostJobs`).
/// Characters of one attention item's `summary`.
pub const ATTENTION_SUMMARY_CHARS_MAX: usize = 200;
/// Outstanding attention items one Session carries (all owners).
pub const ATTENTION_PER_SESSION_MAX: usize = 64;
/// Outstanding attention items one owner (extension) retains across
/// Sessions; clearing releases capacity.
pub const ATTENTION_PER_OWNER_MAX: usize = 4_096;
/// Undelivered entries the delivery outbox holds; a transition that would
/// stage past it is refused.
pub const DELIVERY_PENDING_MAX: u64 = 16_384;

// The host work lane (`src/host/jobs.rs`, seed: `hostJobs`).
/// Outbox entries one `hostJobs().deliver` call receives.
pub const HOST_DELIVERY_BATCH_MAX: usize = 64;
/// Batches one host work pass delivers; entries left over continue in the
/// next pass at once.
pub const HOST_PASS_BATCHES_MAX: usize = 16;
/// Passes one wake runs back to back (entries left over, or wakes that
/// arrived during a pass); past it the alarm continues.
pub const HOST_PASSES_PER_WAKE_MAX: usize = 8;
/// Wall time of one host work pass (every `deliver` and the `tick`):
/// the default and the most `hostJobs().timeoutMs` may ask.
pub const HOST_PASS_TIMEOUT_MS: u64 = 30_000;
/// The least `hostJobs().timeoutMs`.
pub const HOST_PASS_TIMEOUT_MS_MIN: u64 = 100;
/// How long a pass whose signal aborted (deadline, close) may take to wind
/// down before it is abandoned.
pub const HOST_PASS_ABORT_GRACE_MS: u64 = 1_000;
/// Bounds of `hostJobs().retryBaseMs` and `retryMaxMs` (defaults:
/// `RETRY_BASE_MS_DEFAULT`, `RETRY_MAX_MS_DEFAULT`).
pub const HOST_RETRY_MS_MIN: u64 = 100;
pub const HOST_RETRY_MS_MAX: u64 = 600_000;

// Attention items and the inbox (see above).
/// Bytes of an attention item's `id` (of `[A-Za-z0-9._:-]`).
pub const ATTENTION_ID_BYTES_MAX: usize = 128;
/// Bytes of an attention item's `kind` (of `[a-z0-9_.-]`).
pub const ATTENTION_KIND_BYTES_MAX: usize = 64;
/// Attention items one inbox row carries (the newest); the row's
/// `attentionCount` tells how many are open.
pub const INBOX_ATTENTION_PER_ROW_MAX: usize = 8;
/// Rows of one inbox page.
pub const INBOX_PAGE_SESSIONS_MAX: usize = 200;
/// Groups of one usage ledger page (`GET /usage`).
pub const USAGE_PAGE_GROUPS_MAX: usize = 200;

// Mail between Agents (`src/mail/`, seed: "Agent fleet", "Delegated
// replies").
/// Bytes (UTF-8) of one mail's text: the same as a prompt's
/// ([`TEXT_BYTES_MAX`]); a reply's text (the child's answer) is cut to it
/// with a `…` mark.
pub const MAIL_TEXT_BYTES_MAX: usize = TEXT_BYTES_MAX;
/// Bytes of a mail key (a send's `m_<hex>`, a reply's `<key>:reply:0`);
/// printable ASCII, no space.
pub const MAIL_KEY_BYTES_MAX: usize = 512;
/// Bytes of an Agent id in a mail address, of `[A-Za-z0-9._:-]` (the
/// Session id alphabet; `/` separates the two in `replyTo`).
pub const AGENT_ID_BYTES_MAX: usize = 128;
/// Mails one Agent's outbox holds pending delivery; a `send` past it is
/// refused (`429 queue_full`). Replies a settlement stages are not refused
/// (one per received delegation), but count toward it.
pub const MAIL_PENDING_MAX: usize = 1_024;
/// Delivery attempts of one mail, the first included; after the last one
/// fails the mail is undeliverable (`recipient_offline`).
pub const MAIL_ATTEMPTS_MAX: u32 = 10;
/// The wait after a mail's first failed delivery attempt, in ms; it doubles
/// after each further failure, up to [`MAIL_RETRY_MAX_MS`].
pub const MAIL_RETRY_BASE_MS: i64 = 3_000;
/// The longest wait between two delivery attempts of one mail, in ms.
pub const MAIL_RETRY_MAX_MS: i64 = 60_000;
/// Outbox rows kept once they need nothing more (delivered, refused,
/// undeliverable, recalled, and a send's whose reply arrived), and inbox
/// rows kept once no reply is owed: the newest; older ones are pruned by
/// the transitions that settle rows. A reply line older than the kept
/// inbox renders as plain (neutralised) user text.
pub const MAIL_KEPT_MAX: usize = 10_000;
/// Bytes of a recorded delivery failure (the host's error text).
pub const MAIL_ERROR_BYTES_MAX: usize = 1_024;
// Agents in one fleet (`src/fleet/`, `src/host/fleet.rs`, `js/do/hooks.mjs`).
// An Agent id the `agents` module addresses (the name its Durable Object
// is found by) is a mail address: `AGENT_ID_BYTES_MAX` above.
/// Characters of a completed command's final text `agents.wait` returns
/// (seed: at most 16,384, `truncated` when cut).
pub const FLEET_WAIT_TEXT_CHARS_MAX: usize = 16_384;
/// The longest `agents.wait` (seed: `timeoutMs` from 1 to 30000).
pub const FLEET_WAIT_TIMEOUT_MS_MAX: u64 = 30_000;
/// Wall time of one Durable Object to Durable Object call (a delivery, a
/// read, a recall); a wait gets its `timeoutMs` on top.
pub const FLEET_CALL_TIMEOUT_MS: u64 = 10_000;
/// Bytes of one answer or mail crossing between two Agents (a Session read
/// page is at most `READ_PAGE_BYTES_MAX` of messages, plus its frame).
pub const FLEET_BODY_BYTES_MAX: usize = 2_097_152;
/// Agent ids one fleet grant names (its scope; `"*"` names every Agent).
pub const FLEET_GRANT_AGENTS_MAX: usize = 256;
/// Bytes of a fleet grant's provenance (opaque host data, as JSON text).
pub const FLEET_GRANT_PROVENANCE_BYTES_MAX: usize = 4_096;
/// Bytes of one fleet grant as JSON text.
pub const FLEET_GRANT_BYTES_MAX: usize = 65_536;

// The Agent directory (`src/fleet/directory.rs`, seed: "Agent fleet").
/// Agents one directory holds (created and self-registered together).
pub const DIRECTORY_AGENTS_MAX: usize = 10_000;
/// Erased Agent ids the directory remembers (oldest forgotten first).
pub const DIRECTORY_ERASED_KEPT_MAX: usize = 10_000;
/// Characters of an Agent's name.
pub const AGENT_NAME_CHARS_MAX: usize = 128;
/// Agents in one `agents.list` page (default [`DIRECTORY_PAGE_DEFAULT`]).
pub const DIRECTORY_PAGE_MAX: usize = 200;
pub const DIRECTORY_PAGE_DEFAULT: usize = 50;
/// Bytes of the working directory the host's `fleet().workingDirectory`
/// names (longer or malformed answers fall back to `/`).
pub const WORKING_DIRECTORY_BYTES_MAX: usize = 1_024;
/// Mails one delivery pass carries at once (the rest in the next pass).
pub const MAIL_DELIVERIES_PER_PASS_MAX: usize = 16;
/// Passes one wake runs back to back while mail stays due.
pub const MAIL_PASSES_PER_WAKE_MAX: usize = 4;

// Models (`src/model/preference.rs`, `src/model_choice.rs`, seed: the
// agent-control paragraph's setModel/models and the /model-preference
// resolver).
/// Offered `provider/model` addresses a host may state (`SHIITAKE_MODELS`,
/// `models().offered`), and at most what `agents.models` returns.
pub const MODELS_OFFERED_MAX: usize = 200;
/// Bytes of one `provider/model` address.
pub const MODEL_ADDRESS_BYTES_MAX: usize = 256;
/// Wall time of the host's `models().lastSwitch` callback at a turn's
/// start; past it the layer is skipped.
pub const MODEL_LAST_SWITCH_TIMEOUT_MS: u64 = 5_000;

/// Bytes of `session/update` notifications one ACP prompt stream sends;
/// past it the stream ends with an error (the turn goes on).
pub const ACP_STREAM_BYTES_MAX: usize = 16_777_216;
/// Content blocks in one ACP `session/prompt`.
pub const ACP_PROMPT_BLOCKS_MAX: usize = 64;

// The browser bridge (`src/ui/`, seed knapsack: `Knapsack.ui`).
/// Bytes of the App's id (`tools().ui.id`).
pub const UI_APP_ID_BYTES_MAX: usize = 128;
/// Calls waiting for one Session's browser at once (unclaimed or claimed).
pub const UI_REQUESTS_PER_SESSION_MAX: usize = 16;
/// Browser event streams open on one Session.
pub const UI_STREAMS_PER_SESSION_MAX: usize = 8;
/// Browser event streams open on one Agent instance.
pub const UI_STREAMS_MAX: usize = 256;
/// Bytes written to one browser event stream and not read yet; past it the
/// stream is ended (the browser reconnects and is sent what waits then).
/// Twice what the requests one Session may have waiting can hold, so a
/// stream opening on a full Session is not cut off.
pub const UI_STREAM_BACKLOG_BYTES_MAX: usize = 8_388_608;
/// Bytes of a claim's body (`{requestId}`).
pub const UI_CLAIM_BODY_BYTES_MAX: usize = 1_024;
/// Bytes of a result's body: a result within `TOOL_PAYLOAD_BYTES_MAX` plus
/// 4 KiB for its envelope (`requestId`, `claimId`).
pub const UI_RESULT_BODY_BYTES_MAX: usize = 266_240;
/// Commands one `ui.discover` answer lists.
pub const UI_COMMANDS_MAX: usize = 128;
/// Bytes of one command's name.
pub const UI_COMMAND_NAME_BYTES_MAX: usize = 128;
/// Bytes of the error text a browser reports for a command (longer is cut).
pub const UI_ERROR_BYTES_MAX: usize = 4_096;
/// How long a `ui` call waits for the browser, in percent of the tool
/// timeout: the rest leaves an `execute` run that made the call (bounded by
/// the tool timeout itself) time to report why it ended.
pub const UI_WAIT_PERCENT_OF_TOOL_TIMEOUT: u64 = 90;
/// How long a waiting `ui` call, still unclaimed, goes on without any
/// browser stream open on its Session before it fails saying no browser is
/// connected (a browser that connects meanwhile is sent the request). Also
/// how often a waiting call looks again.
pub const UI_NO_BROWSER_MS: u64 = 2_000;
/// Wall time of the host's `tools().ui.hasSession(sessionId)`; past it the
/// event stream answers 404.
pub const UI_HAS_SESSION_TIMEOUT_MS: u64 = 5_000;

/// Spans of OpenTelemetry traces (`trace.rs`) in one OTLP export request.
pub const TRACE_EXPORT_SPANS_MAX: usize = 256;

/// Bytes of span bodies in one OTLP export request (at least one span is
/// sent, each bounded by its bounded attributes).
pub const TRACE_EXPORT_BYTES_MAX: usize = 256 * 1024;

/// Export requests in one lane pass; spans left wait for the next.
pub const TRACE_EXPORT_BATCHES_MAX: usize = 8;

/// Failed exports of a span before it is dropped (counted in the log): at
/// the lane's default backoff, about four minutes of retries.
pub const TRACE_EXPORT_ATTEMPTS_MAX: u32 = 8;

/// Spans kept while the receiver fails; past it the oldest are dropped.
pub const TRACE_PENDING_MAX: u64 = 4_096;

/// Bytes of one span's string attribute (a model or tool name); cut past it.
pub const TRACE_ATTRIBUTE_BYTES_MAX: usize = 256;

/// How long a span waits for others to share its export request (the
/// OpenTelemetry batch processor's delay, shorter), unless a full batch
/// waits.
pub const TRACE_EXPORT_DELAY_MS: i64 = 1_000;

/// Milliseconds one OTLP export request may take before it fails.
pub const TRACE_EXPORT_TIMEOUT_MS: u64 = 10_000;

/// Header entries and bytes of `telemetry().headers` (secrets: never
/// stored, never logged).
pub const TRACE_HEADERS_MAX: usize = 16;
pub const TRACE_HEADER_BYTES_MAX: usize = 4_096;

/// Bytes of `telemetry().endpoint`.
pub const TRACE_ENDPOINT_BYTES_MAX: usize = 2_048;
