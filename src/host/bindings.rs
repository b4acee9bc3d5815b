//! Every JS binding of the host: the platform APIs web-sys does not cover
//! for a Durable Object (the storage alarm, timers, the global `fetch`), the
//! shim's tool host (`js/do/hooks.mjs`), and the one logging helper.

use js_sys::Promise;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen]
extern "C" {
    pub type DurableObjectStorage;

    #[wasm_bindgen(method, catch, js_name = transactionSync)]
    pub fn transaction_sync(
        this: &DurableObjectStorage,
        body: &mut dyn FnMut() -> Result<(), JsValue>,
    ) -> Result<JsValue, JsValue>;

    #[wasm_bindgen(method, js_name = setAlarm)]
    fn set_alarm_at(this: &DurableObjectStorage, scheduled_ms: f64) -> Promise;

    #[wasm_bindgen(method, js_name = deleteAlarm)]
    fn delete_alarm_now(this: &DurableObjectStorage) -> Promise;

    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(callback: &js_sys::Function, ms: f64) -> JsValue;

    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(timer: &JsValue);

    #[wasm_bindgen(js_name = fetch)]
    fn global_fetch(request: &web_sys::Request) -> Promise;

    /// The shim's extension host (`js/do/hooks.mjs`): the roster's manifests and
    /// the authored callbacks (`js/extensions.mjs`).
    pub type JsExtensions;

    /// The roster as a JSON array of manifests, or `{"error"}` when the
    /// host's `extensions()` is unusable.
    #[wasm_bindgen(method)]
    pub fn manifests(this: &JsExtensions) -> String;

    /// Runs one callback synchronously: JSON request in, JSON answer out.
    #[wasm_bindgen(method)]
    pub fn call(this: &JsExtensions, request: &str) -> String;

    /// The shim's host work lane (`js/do/hooks.mjs`, `ShiitakeDO#hostJobs()`).
    pub type JsJobs;

    /// `{tick, retryBaseMs?, retryMaxMs?, timeoutMs?}` or `{error}` as JSON.
    #[wasm_bindgen(method)]
    pub fn spec(this: &JsJobs) -> String;

    /// Hands the host a batch of outbox entries (a JSON array): resolves
    /// once the host took them, rejects when it did not.
    #[wasm_bindgen(method)]
    pub fn deliver(this: &JsJobs, entries: &str, signal: &web_sys::AbortSignal) -> Promise;

    /// The host's own concurrent work after delivery: resolves or rejects.
    #[wasm_bindgen(method)]
    pub fn tick(this: &JsJobs, signal: &web_sys::AbortSignal) -> Promise;

    /// The shim's fleet (`js/do/hooks.mjs`, `ShiitakeDO#fleet()`): calls into
    /// the peer Agents' Durable Objects of the same namespace. Each call
    /// resolves to the peer's answer as JSON (`{value}` or `{error: {code,
    /// status, message}}`) and rejects only when the peer was unreachable.
    pub type JsFleet;

    /// `{self, cancellationText}` or `{error}` as JSON.
    #[wasm_bindgen(method)]
    pub fn spec(this: &JsFleet) -> String;

    /// Delivers one mail (JSON) to Agent `agent`: its receipt.
    #[wasm_bindgen(method)]
    pub fn send(this: &JsFleet, agent: &str, mail: &str, signal: &web_sys::AbortSignal) -> Promise;

    /// Agent `agent`'s bounded read of a Session (`query`: `{limit?, cursor?}`).
    #[wasm_bindgen(method)]
    pub fn read(
        this: &JsFleet,
        agent: &str,
        session: &str,
        query: &str,
        signal: &web_sys::AbortSignal,
    ) -> Promise;

    /// Agent `agent`'s settlement of one command, waiting up to `timeout_ms`.
    #[wasm_bindgen(method)]
    pub fn settlement(
        this: &JsFleet,
        agent: &str,
        session: &str,
        command: &str,
        timeout_ms: f64,
        signal: &web_sys::AbortSignal,
    ) -> Promise;

    /// The recall of the send keyed `key` at Agent `agent`.
    #[wasm_bindgen(method)]
    pub fn recall(
        this: &JsFleet,
        agent: &str,
        session: &str,
        key: &str,
        signal: &web_sys::AbortSignal,
    ) -> Promise;

    /// One request (JSON) to the fleet's directory object
    /// (`crate::fleet::directory`): its `{value}` or `{error}`.
    #[wasm_bindgen(method)]
    pub fn directory(this: &JsFleet, request: &str, signal: &web_sys::AbortSignal) -> Promise;

    /// Agent `agent`'s membership change (`{archived}` JSON,
    /// `crate::fleet::member`).
    #[wasm_bindgen(method)]
    pub fn member(
        this: &JsFleet,
        agent: &str,
        request: &str,
        signal: &web_sys::AbortSignal,
    ) -> Promise;

    /// Deletes Agent `agent`'s storage (host-only erasure).
    #[wasm_bindgen(method)]
    pub fn erase(this: &JsFleet, agent: &str, signal: &web_sys::AbortSignal) -> Promise;

    /// Agent `agent`'s fleet Sessions request (`{grant, op, args}` JSON,
    /// `crate::fleet::sessions`).
    #[wasm_bindgen(method)]
    pub fn sessions(
        this: &JsFleet,
        agent: &str,
        request: &str,
        signal: &web_sys::AbortSignal,
    ) -> Promise;

    /// The host's fleet grant for Session `session` (`fleet().grant`), read
    /// at each call: `{value: grant | null}` or `{error}` as JSON.
    #[wasm_bindgen(method)]
    pub fn grant(this: &JsFleet, session: &str) -> String;

    /// The host's `workingDirectory(agentId)`: the text, or undefined.
    #[wasm_bindgen(method, js_name = workingDirectory)]
    pub fn working_directory(this: &JsFleet, agent: &str) -> Option<String>;

    /// The host's `cancellationText(meta)` (JSON in): the text, or undefined.
    #[wasm_bindgen(method, js_name = cancellationText)]
    pub fn cancellation_text(this: &JsFleet, meta: &str) -> Option<String>;

    /// Sets Agent `agent`'s explicit model (`choice`: `{model, reasoning?}`
    /// JSON) through its `fleetSetModel`.
    #[wasm_bindgen(method, js_name = setModel)]
    pub fn set_model(
        this: &JsFleet,
        agent: &str,
        choice: &str,
        signal: &web_sys::AbortSignal,
    ) -> Promise;

    /// The shim's model host (`ShiitakeDO#models()`, `js/do/hooks.mjs`).
    pub type JsModels;

    /// `{offered?, teamDefault?, keySources?, lastSwitch, error?}` as JSON.
    #[wasm_bindgen(method)]
    pub fn spec(this: &JsModels) -> String;

    /// The host's `lastSwitch(sessionId, meta)` (meta JSON or undefined):
    /// resolves to JSON `{value: address | null}` or `{error}`, bounded in
    /// time by the shim.
    #[wasm_bindgen(method, js_name = lastSwitch)]
    pub fn last_switch(this: &JsModels, session: &str, meta: Option<String>) -> Promise;

    /// The shim's metadata host (`ShiitakeDO#meta()`, `js/do/hooks.mjs`).
    pub type JsMeta;

    /// `{schema?, standard, identityPath?, error?}` as JSON (`schema`: a
    /// JSON Schema the core validates with; `standard`: the shim validates).
    #[wasm_bindgen(method)]
    pub fn spec(this: &JsMeta) -> String;

    /// The host's Standard Schema run on metadata (JSON): JSON `{value}`,
    /// `{invalid}` (the message names the field path) or `{error}`.
    #[wasm_bindgen(method)]
    pub fn validate(this: &JsMeta, meta: &str) -> String;

    /// The shim's tool host (`js/do/hooks.mjs`).
    #[derive(Clone)]
    pub type JsTools;

    /// `{modules, direct, access, confirm, loader, ...}` as JSON.
    #[wasm_bindgen(method)]
    pub fn spec(this: &JsTools) -> String;

    /// Runs one operation: resolves to JSON `{result, data?, images?}` or
    /// `{error}`. `progress` is the operation's `ctx.progress`: it takes the
    /// report as JSON and answers why it was refused, or undefined.
    #[wasm_bindgen(method)]
    pub fn invoke(
        this: &JsTools,
        module: &str,
        operation: &str,
        args: &str,
        invocation: &str,
        signal: &web_sys::AbortSignal,
        progress: &js_sys::Function,
    ) -> Promise;

    /// The host's confirm hook: resolves to a boolean.
    #[wasm_bindgen(method)]
    pub fn confirm(this: &JsTools, request: &str, signal: &web_sys::AbortSignal) -> Promise;

    /// The host's MCP servers, `[{name, url, headers?}]` as JSON (header
    /// values are credentials: kept in memory only).
    #[wasm_bindgen(method, js_name = mcpServers)]
    pub fn mcp_servers(this: &JsTools) -> String;

    /// One MCP HTTP request through the host's fetch, redirects not
    /// followed: resolves to `{status, contentType, headers, body}`.
    /// `onChunk` (optional) gets each chunk of an event-stream body as it
    /// arrives; its answering `true` ends the read there.
    #[cfg(feature = "mcp")]
    #[wasm_bindgen(method, js_name = mcpFetch)]
    pub fn mcp_fetch(
        this: &JsTools,
        method: &str,
        url: &str,
        headers: &js_sys::Array,
        body: &str,
        signal: Option<&web_sys::AbortSignal>,
        on_chunk: Option<&js_sys::Function>,
    ) -> Promise;

    /// One call of a host Files port (`read`, `stat`, `list`, `write`,
    /// `replace`) with its arguments as a JSON array: resolves to JSON
    /// `{value}` or `{error}`, never rejects.
    #[wasm_bindgen(method, js_name = filesCall)]
    pub fn files_call(
        this: &JsTools,
        port: &str,
        method: &str,
        args: &str,
        signal: &web_sys::AbortSignal,
    ) -> Promise;

    /// Forgets the files grant holder's port captured for a run (`port`:
    /// the key `filesCall` reached it by), when the run ends.
    #[wasm_bindgen(method, js_name = filesRelease)]
    pub fn files_release(this: &JsTools, port: &str);

    /// The host's Computer list now: JSON `{list: [{id, name, confirmCalls,
    /// files, patches}]}` or `{error}`.
    #[wasm_bindgen(method, js_name = computersList)]
    pub fn computers_list(this: &JsTools) -> String;

    /// Asks Computer `name` for its advertisement: resolves to its JSON
    /// text, rejects with the provider's refusal.
    #[wasm_bindgen(method, js_name = computerDescribe)]
    pub fn computer_describe(this: &JsTools, name: &str, signal: &web_sys::AbortSignal) -> Promise;

    /// One call of Computer `name`: resolves to JSON `{result}` or `{error}`.
    #[wasm_bindgen(method, js_name = computerCall)]
    pub fn computer_call(
        this: &JsTools,
        name: &str,
        operation: &str,
        args: &str,
        invocation: &str,
        signal: &web_sys::AbortSignal,
    ) -> Promise;

    /// The host's `onUnavailable` report: `{name, reason}` as JSON.
    #[wasm_bindgen(method, js_name = onUnavailable)]
    pub fn on_unavailable(this: &JsTools, report: &str);

    /// The host's `tools().ui.hasSession(sessionId)`: resolves to whether
    /// a browser may open the Session's bridge.
    #[wasm_bindgen(method, js_name = uiHasSession)]
    pub fn ui_has_session(this: &JsTools, session: &str, signal: &web_sys::AbortSignal) -> Promise;

    /// Runs model code in a fresh sandbox: resolves to JSON `{result}` or
    /// `{error}`, never rejects.
    #[wasm_bindgen(method)]
    pub fn execute(
        this: &JsTools,
        code: &str,
        namespaces: js_sys::Array,
        dispatch: &js_sys::Function,
        signal: &web_sys::AbortSignal,
    ) -> Promise;
}

/// The host's one way to log: `shiitake: <message>` on the console.
pub fn log_error(message: impl std::fmt::Display) {
    web_sys::console::error_1(&format!("shiitake: {message}").into());
}

/// [`log_error`] at info level.
pub fn log_info(message: impl std::fmt::Display) {
    web_sys::console::info_1(&format!("shiitake: {message}").into());
}

/// [`log_error`] at warning level.
pub fn log_warn(message: impl std::fmt::Display) {
    web_sys::console::warn_1(&format!("shiitake: {message}").into());
}

impl DurableObjectStorage {
    /// Issues the write now; the future only reports its completion.
    pub fn set_alarm(&self, at_ms: i64) -> JsFuture {
        JsFuture::from(self.set_alarm_at(at_ms as f64))
    }

    /// Issues the delete now; the future only reports its completion.
    pub fn delete_alarm(&self) -> JsFuture {
        JsFuture::from(self.delete_alarm_now())
    }
}

/// A wait on a promise the host resolves itself (from a timer or a
/// listener, `G` removing it when dropped), settled when dropped: a
/// `JsFuture` frees its callbacks (two closures and their state, kept alive
/// by a cycle) only when its promise settles, so every abandoned wait on a
/// promise that never settles would leak them.
pub struct Wait<G> {
    /// Held for its `Drop`: clears the timer, removes the listener.
    _guard: G,
    resolve: js_sys::Function,
    done: JsFuture,
}

impl<G> Wait<G> {
    /// `arm` gets the promise's resolve function while the promise is
    /// created, hands it to a timer or a listener and answers their guard.
    fn new(arm: impl FnOnce(&js_sys::Function) -> G) -> Self {
        let mut arm = Some(arm);
        let mut armed = None;
        let done = JsFuture::from(Promise::new(&mut |resolve, _| {
            if let Some(arm) = arm.take() {
                armed = Some((arm(&resolve), resolve));
            }
        }));
        let (guard, resolve) = armed.expect("a Promise runs its executor at once");
        Wait {
            _guard: guard,
            resolve,
            done,
        }
    }
}

impl<G: Unpin> std::future::Future for Wait<G> {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        std::pin::Pin::new(&mut self.done).poll(cx).map(drop)
    }
}

impl<G> Drop for Wait<G> {
    fn drop(&mut self) {
        // Resolving a settled promise does nothing.
        let _ = self.resolve.call0(&JsValue::UNDEFINED);
    }
}

/// A pending `setTimeout`, cleared when dropped.
pub struct Timer(JsValue);

impl Drop for Timer {
    fn drop(&mut self) {
        clear_timeout(&self.0);
    }
}

/// A timer: resolves after its delay; dropping it clears the timeout, so an
/// abandoned wait (a long poll answered early, a loop woken early) leaves no
/// timer and no callbacks behind.
pub type Sleep = Wait<Timer>;

/// Resolves after `ms` milliseconds of wall time.
pub fn sleep(ms: u64) -> Sleep {
    Wait::new(|resolve| Timer(set_timeout(resolve, ms as f64)))
}

/// An `abort` listener on a signal, removed when dropped.
#[cfg(feature = "ui")]
pub struct AbortListener {
    signal: web_sys::AbortSignal,
    listener: Option<js_sys::Function>,
}

#[cfg(feature = "ui")]
impl Drop for AbortListener {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            let _ = self
                .signal
                .remove_event_listener_with_callback("abort", listener);
        }
    }
}

/// Resolves when `signal` aborts (at once if it has).
#[cfg(feature = "ui")]
pub fn aborted(signal: &web_sys::AbortSignal) -> Wait<AbortListener> {
    Wait::new(|resolve| {
        let listener = if signal.aborted() {
            let _ = resolve.call0(&JsValue::NULL);
            None
        } else {
            let _ = signal.add_event_listener_with_callback("abort", resolve);
            Some(resolve.clone())
        };
        AbortListener {
            signal: signal.clone(),
            listener,
        }
    })
}

/// Waits for `work` up to `timeout_ms`; then fires `controller`, gives
/// the work `grace_ms` to wind down (its abort handlers run), and answers
/// `None`: it did not end in time, whatever it does now.
pub async fn within<F: std::future::Future>(
    work: F,
    timeout_ms: u64,
    controller: &web_sys::AbortController,
    grace_ms: u64,
) -> Option<F::Output> {
    within_or_stopped(work, timeout_ms, controller, grace_ms)
        .await
        .ok()
}

/// [`within`], telling apart a work that ended in the grace after the
/// abort (`Err(Some(_))`: what it answered once stopped) from one that
/// did not end at all (`Err(None)`).
pub async fn within_or_stopped<F: std::future::Future>(
    work: F,
    timeout_ms: u64,
    controller: &web_sys::AbortController,
    grace_ms: u64,
) -> Result<F::Output, Option<F::Output>> {
    use futures::future::{select, Either};
    let mut work = Box::pin(work);
    if let Either::Left((done, _)) = select(work.as_mut(), sleep(timeout_ms)).await {
        return Ok(done);
    }
    controller.abort();
    if grace_ms == 0 {
        return Err(None);
    }
    match select(work, sleep(grace_ms)).await {
        Either::Left((done, _)) => Err(Some(done)),
        Either::Right(_) => Err(None),
    }
}

pub async fn fetch(request: &web_sys::Request) -> Result<web_sys::Response, JsValue> {
    JsFuture::from(global_fetch(request)).await?.dyn_into()
}

pub fn now_ms() -> i64 {
    js_sys::Date::now() as i64
}

/// The message of a JS error value, for diagnostics.
pub fn error_message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "unknown error".into())
}

/// A string binding of the Worker's env (vars and secrets).
pub fn env_string(env: &JsValue, name: &str) -> Option<String> {
    js_sys::Reflect::get(env, &JsValue::from_str(name))
        .ok()
        .and_then(|v| v.as_string())
        .filter(|v| !v.is_empty())
}

/// Random ids: 96 bits from the platform CSPRNG, hex-encoded.
#[derive(Debug, Default)]
pub struct RandomIds;

/// Bytes of an id.
const ID_BYTES: usize = 12;
/// Ids whose bytes one call to the platform CSPRNG draws: a call crosses
/// into JS (`crypto.getRandomValues`), and admission mints an id each time.
const IDS_PER_DRAW: usize = 32;

thread_local! {
    /// Drawn bytes not yet used (each used once), and how many are used.
    static POOL: std::cell::RefCell<([u8; ID_BYTES * IDS_PER_DRAW], usize)> =
        const { std::cell::RefCell::new(([0; ID_BYTES * IDS_PER_DRAW], ID_BYTES * IDS_PER_DRAW)) };
}

impl crate::ctx::IdSource for RandomIds {
    fn next_id(&mut self, prefix: &str) -> String {
        POOL.with_borrow_mut(|(pool, used)| {
            if *used == pool.len() {
                // The platform CSPRNG failing leaves no safe way to mint ids.
                getrandom::fill(pool).expect("platform randomness is available");
                *used = 0;
            }
            let bytes = &pool[*used..*used + ID_BYTES];
            *used += ID_BYTES;
            format!("{prefix}{}", crate::text::hex(bytes))
        })
    }
}
