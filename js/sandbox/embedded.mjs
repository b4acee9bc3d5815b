// The embedded `execute` sandbox: model-written JavaScript runs in QuickJS
// compiled to wasm (quickjs-emscripten's release sync build, chosen by
// bench/sandbox-engine.mjs), inside the host's own isolate or process, with
// the same guest API and checks as the Worker Loader door (js/execute.mjs,
// through js/sandbox/guest.mjs).
//
// What reaches the guest: the ECMAScript built-ins, a silent `console`,
// `setTimeout`/`clearTimeout` on the host's clock (as the door's guest has),
// and one `host.call(path, argsJson)` the harness builds the namespaces on.
// No network, modules, host globals or wasm (QuickJS has none of them unless
// given), and no code from strings: `eval`, `Function` and the other
// function constructors throw. Each run gets a fresh runtime and context
// (nothing it leaves is seen by the next), a stack limit and a CPU budget
// enforced by the engine's interrupt handler, and the engine's linear memory
// is capped (the memory bound of the runs in flight, all one Agent's: the
// build's QuickJS heap limit counts allocations, not bytes). An engine that
// fails (a trap, the host's stack exhausted) is dropped, and so is one that
// grew, or any unless kept, once no run uses it: the next run gets a fresh one.
//
// Host calls are promises: the guest's `host.call` answers a QuickJS promise
// the host settles when the dispatch does, then runs the pending jobs (the
// sync build's pattern; no asyncify).
import variant from "@jitl/quickjs-wasmfile-release-sync";
import { newQuickJSWASMModuleFromVariant, newVariant } from "quickjs-emscripten-core";
import { GUEST_CPU_MS_MAX, GUEST_MEMORY_BYTES_MAX, GUEST_STACK_BYTES_MAX, GUEST_TIMERS_MAX } from "../limits.mjs";
import { aborted, answerCall, checkReply, errorText, guestHarness, raceAbort } from "./guest.mjs";

// Where the clock stands still while code runs (Cloudflare advances it only
// at I/O; local workerd and Node do advance it), the CPU budget is counted
// in interrupt checks instead: QuickJS calls the handler about every 10,000
// operations, measured 2 to 6 times a millisecond on the development machine
// depending on the code, so a budget of B ms ends a run within about B/2 to
// 2B of computing there.
const INTERRUPTS_PER_CPU_MS = 4;

// Run first in each context, given the host's `wait(id, ms)` (a promise
// that resolves that much later) and `cancel(id)`: no code from strings; timers
// on the host's clock (the door's guest has them too); a console that says
// nothing (model code logs; the door's console reaches no one either).
const PRELUDE = `(function (wait, cancel, codecs) {
  "use strict";
  const refuse = function () {
    throw new EvalError("code generation from strings is not available in the sandbox");
  };
  const seal = (object, key, value) => Object.defineProperty(object, key, { value, writable: false, configurable: false });
  // \`Function.prototype\` and \`instanceof Function\` keep working.
  seal(refuse, "prototype", Object.getPrototypeOf(refuse));
  for (const fn of [function () {}, async function () {}, function* () {}, async function* () {}]) {
    seal(Object.getPrototypeOf(fn), "constructor", refuse);
  }
  seal(globalThis, "Function", refuse);
  seal(globalThis, "eval", refuse);
  let timers = 0;
  seal(globalThis, "setTimeout", (fn, ms, ...args) => {
    if (typeof fn !== "function") throw new TypeError("setTimeout takes a function");
    if (++timers > ${GUEST_TIMERS_MAX}) throw new RangeError("at most ${GUEST_TIMERS_MAX} timers a run");
    const id = timers;
    wait(id, Math.max(0, Number(ms) || 0)).then(() => fn(...args));
    return id;
  });
  seal(globalThis, "clearTimeout", (id) => cancel(Number(id)));
  const quiet = () => {};
  seal(globalThis, "console", Object.freeze({ log: quiet, info: quiet, warn: quiet, error: quiet, debug: quiet }));
  // The door's guest (workerd) has UTF-8 text codecs and base64; QuickJS
  // has neither. Their source (CODECS) is evaluated on first use only: it
  // would double a small run's cost. Writable, as the door's globals are (a
  // run's context is its own).
  const names = ["TextEncoder", "TextDecoder", "btoa", "atob"];
  const define = (key, value) => Object.defineProperty(globalThis, key, { value, writable: true, configurable: true });
  for (const key of names) {
    Object.defineProperty(globalThis, key, {
      configurable: true,
      get() {
        const all = codecs();
        for (const name of names) define(name, all[name]);
        return all[key];
      },
      set(value) {
        define(key, value);
      },
    });
  }
})`;

// The guest's TextEncoder, TextDecoder, btoa and atob, as the WHATWG
// Encoding and HTML standards define them: a lone surrogate encodes as
// U+FFFD, an invalid sequence decodes to one U+FFFD per maximal subpart, a
// leading BOM is dropped. Evaluated in a run's context when its code first
// touches one of them (the prelude's `codecs()`).
const CODECS = `(() => {
  "use strict";
  class TextEncoder {
    get encoding() { return "utf-8"; }
    encode(input = "") {
      const out = [];
      for (const ch of String(input)) {
        let c = ch.codePointAt(0);
        if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
        if (c < 0x80) out.push(c);
        else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
        else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
        else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      }
      return new Uint8Array(out);
    }
  }
  class TextDecoder {
    constructor(label = "utf-8") {
      if (!/^(utf-?8|unicode-1-1-utf-8)$/i.test(String(label).trim())) throw new RangeError("only utf-8 is supported in the sandbox");
    }
    get encoding() { return "utf-8"; }
    decode(input) {
      if (input === undefined) return "";
      const bytes = ArrayBuffer.isView(input) ? new Uint8Array(input.buffer, input.byteOffset, input.byteLength) : new Uint8Array(input);
      const points = [];
      let cp = 0, needed = 0, seen = 0, lower = 0x80, upper = 0xbf;
      let i = bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0;
      for (; i < bytes.length; i++) {
        const b = bytes[i];
        if (needed === 0) {
          if (b <= 0x7f) points.push(b);
          else if (b >= 0xc2 && b <= 0xdf) { needed = 1; cp = b & 0x1f; }
          else if (b >= 0xe0 && b <= 0xef) { if (b === 0xe0) lower = 0xa0; if (b === 0xed) upper = 0x9f; needed = 2; cp = b & 0xf; }
          else if (b >= 0xf0 && b <= 0xf4) { if (b === 0xf0) lower = 0x90; if (b === 0xf4) upper = 0x8f; needed = 3; cp = b & 7; }
          else points.push(0xfffd);
          continue;
        }
        if (b < lower || b > upper) {
          cp = needed = seen = 0; lower = 0x80; upper = 0xbf;
          points.push(0xfffd);
          i--;
          continue;
        }
        lower = 0x80; upper = 0xbf;
        cp = (cp << 6) | (b & 0x3f);
        if (++seen === needed) { points.push(cp); cp = needed = seen = 0; }
      }
      if (needed !== 0) points.push(0xfffd);
      let text = "";
      for (let at = 0; at < points.length; at += 8192) text += String.fromCodePoint(...points.slice(at, at + 8192));
      return text;
    }
  }
  const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const invalid = (message) => Object.assign(new Error(message), { name: "InvalidCharacterError" });
  const btoa = (data) => {
    const s = String(data);
    let out = "";
    for (let i = 0; i < s.length; i += 3) {
      const a = s.charCodeAt(i), b = s.charCodeAt(i + 1), c = s.charCodeAt(i + 2);
      if (a > 255 || b > 255 || c > 255) throw invalid("btoa: a character is outside of the Latin1 range");
      out += B64[a >> 2] + B64[((a & 3) << 4) | ((b || 0) >> 4)];
      out += i + 1 < s.length ? B64[((b & 15) << 2) | ((c || 0) >> 6)] : "=";
      out += i + 2 < s.length ? B64[c & 63] : "=";
    }
    return out;
  };
  const atob = (data) => {
    let s = String(data).replace(/[\\t\\n\\f\\r ]/g, "");
    if (s.length % 4 === 0) s = s.replace(/==?$/, "");
    if (s.length % 4 === 1 || /[^A-Za-z0-9+/]/.test(s)) throw invalid("atob: the string is not correctly encoded");
    let out = "", bits = 0, value = 0;
    for (const ch of s) {
      value = (value << 6) | B64.indexOf(ch);
      bits += 6;
      if (bits >= 8) { bits -= 8; out += String.fromCharCode((value >> bits) & 255); }
    }
    return out;
  };
  return { TextEncoder, TextDecoder, btoa, atob };
})()`;

// The engine's linear memory at start: the build's INITIAL_MEMORY (16 MiB).
const ENGINE_INITIAL_BYTES = 16 * 1024 * 1024;
// How long an engine not kept (a Worker's) outlives its last run: the runs
// of one turn, and the turns of a conversation, come seconds apart, and a
// fresh instantiation costs about 2-3 ms a run (bench/execute.mjs
// --same-agent); an Agent left idle gives its 16 MiB back after this.
const ENGINE_IDLE_MS = 10_000;
const WASM_PAGE_BYTES = 65_536;

/**
 * Instantiates the engine from `wasmModule` on a linear memory whose
 * maximum is the cap (the build imports its memory): past it a growth
 * fails, the allocation fails, and QuickJS throws "out of memory" (or,
 * with no memory left for the error, null). `{quickjs, memory, refusals}`:
 * `refusals` counts the growths refused, so a run can tell why it failed.
 */
async function newEngine(wasmModule, memoryCap) {
  const memory = new WebAssembly.Memory({ initial: ENGINE_INITIAL_BYTES / WASM_PAGE_BYTES, maximum: Math.floor(memoryCap / WASM_PAGE_BYTES) });
  const engine = { quickjs: undefined, memory, refusals: 0 };
  const grow = memory.grow;
  Object.defineProperty(memory, "grow", {
    value(pages) {
      try {
        return grow.call(memory, pages);
      } catch (error) {
        engine.refusals += 1;
        throw error;
      }
    },
  });
  // emscripten waits for onSuccess and nothing else: a failed instantiation
  // would leave the load pending forever, so it rejects here instead.
  let fail;
  const failed = new Promise((_, reject) => (fail = reject));
  const instantiateWasm = (imports, onSuccess) => {
    Promise.resolve(typeof wasmModule === "function" ? wasmModule() : wasmModule)
      .then((module) => WebAssembly.instantiate(module, imports).then((instance) => onSuccess(instance, module)))
      .catch(fail);
    return {};
  };
  const variantWithMemory = newVariant(variant, { wasmMemory: memory, emscriptenModule: { instantiateWasm } });
  engine.quickjs = await Promise.race([newQuickJSWASMModuleFromVariant(variantWithMemory), failed]);
  return engine;
}

/** The engine is broken (a trap, the host's stack exhausted): not a guest error QuickJS reported. */
class EngineFailure extends Error {}

/**
 * Runs `execute` guests in embedded QuickJS. `wasmModule`: the engine's wasm
 * as a WebAssembly.Module, a promise of one or a function answering either
 * (called at the first run): in a Worker, imported as a CompiledWasm module
 * (a Worker cannot compile wasm bytes); in Node, see js/sandbox/node.mjs.
 * One engine instance serves the runs in flight, each in its own runtime.
 * `keepEngine`: keep it between runs too (a trivial run then costs about a
 * millisecond, not the instantiation's several); else it is released once no
 * run has been in flight for ENGINE_IDLE_MS: V8 counts each engine's 16 MiB
 * linear memory as the isolate's (external) memory, against a Worker's
 * 128 MB, though it commits well under 1 MiB. A grown engine is released as
 * soon as no run is in flight. Either way each run has a fresh runtime and
 * context: what is kept is the engine, never a guest's state.
 */
export class EmbeddedSandbox {
  #wasmModule;
  #limits;
  #engine;
  #current;
  #inFlight = 0;
  #keepEngine;
  #idleMs;
  #idle;

  /** `limits` (tests): `{memoryBytes, stackBytes, cpuMs}` lower than the defaults; `idleMs` (tests): a shorter idle time. */
  constructor({ wasmModule, keepEngine = false, limits = {}, idleMs = ENGINE_IDLE_MS } = {}) {
    if (!wasmModule) throw new TypeError("EmbeddedSandbox needs the engine's wasmModule");
    this.#wasmModule = wasmModule;
    this.#keepEngine = keepEngine;
    this.#idleMs = Math.min(idleMs, ENGINE_IDLE_MS);
    this.#limits = {
      memoryBytes: Math.min(limits.memoryBytes ?? GUEST_MEMORY_BYTES_MAX, GUEST_MEMORY_BYTES_MAX),
      stackBytes: Math.min(limits.stackBytes ?? GUEST_STACK_BYTES_MAX, GUEST_STACK_BYTES_MAX),
      cpuMs: Math.min(limits.cpuMs ?? GUEST_CPU_MS_MAX, GUEST_CPU_MS_MAX),
    };
  }

  /**
   * Runs model-written code, as `runGuest` (js/execute.mjs) does: resolves to
   * `{"result": value}` or `{"error": message}` JSON text; never rejects.
   */
  async run({ code, namespaces, dispatch, signal } = {}) {
    if (signal?.aborted) return aborted(signal);
    clearTimeout(this.#idle);
    const harness = guestHarness(code, namespaces);
    if (harness.error !== undefined) return JSON.stringify({ error: harness.error });
    let engine;
    try {
      this.#engine ??= newEngine(this.#wasmModule, this.#limits.memoryBytes);
      engine = await this.#engine;
    } catch (error) {
      this.#engine = undefined;
      return JSON.stringify({ error: `the embedded sandbox cannot start: ${errorText(error)}` });
    }
    this.#current = engine;
    let run;
    try {
      run = new Run(engine, this.#limits, dispatch);
    } catch (error) {
      this.#drop(engine);
      return JSON.stringify({ error: `the embedded sandbox failed: ${errorText(error)}` });
    }
    this.#inFlight += 1;
    try {
      return await raceAbort(run.reply(harness.source), signal);
    } finally {
      this.#inFlight -= 1;
      const healthy = run.close();
      // A grown memory never shrinks: an idle engine gives it back.
      const grown = engine.memory.buffer.byteLength > ENGINE_INITIAL_BYTES;
      if (!healthy || (this.#inFlight === 0 && grown)) this.#drop(engine);
      else if (this.#inFlight === 0 && !this.#keepEngine) {
        this.#idle = setTimeout(() => this.#drop(engine), this.#idleMs);
        // Node: an idle engine does not hold the process open.
        this.#idle.unref?.();
      }
    }
  }

  /** Bytes of the engine's linear memory now (0 when there is none): what it holds of its host. */
  memoryBytes() {
    return this.#current?.memory.buffer.byteLength ?? 0;
  }

  /** Drops an engine (failed, or grown and idle): the next run instantiates a fresh one. */
  #drop(engine) {
    if (this.#current !== engine) return;
    this.#current = undefined;
    this.#engine = undefined;
  }
}

/** One guest run: its own runtime and context, released by `close`. */
class Run {
  #engine;
  #refusals;
  #runtime;
  #context;
  #limits;
  #dispatch;
  #pending = new Set();
  #wake;
  #closed = false;
  #failed = false;
  #cpuMs = 0;
  #sliceStart = 0;
  #interrupts = 0;
  #interrupted = false;
  #clockMoves = false;
  #handles = [];
  #timers = new Map();

  constructor(engine, limits, dispatch) {
    this.#engine = engine;
    this.#refusals = engine.refusals;
    this.#limits = limits;
    this.#dispatch = dispatch;
    this.#runtime = engine.quickjs.newRuntime();
    this.#runtime.setMaxStackSize(limits.stackBytes);
    this.#runtime.setInterruptHandler(() => this.#overBudget());
    this.#context = this.#runtime.newContext();
  }

  #overBudget() {
    this.#interrupts += 1;
    const now = performance.now();
    // The clock is trusted once it is seen to move inside a slice.
    this.#clockMoves ||= now !== this.#sliceStart;
    const over = this.#clockMoves
      ? this.#cpuMs + (now - this.#sliceStart) > this.#limits.cpuMs
      : this.#interrupts > this.#limits.cpuMs * INTERRUPTS_PER_CPU_MS;
    this.#interrupted ||= over;
    return this.#interrupted;
  }

  /** Runs `step` (engine work) as a slice of the guest's CPU budget. */
  #slice(step) {
    this.#sliceStart = performance.now();
    try {
      return step();
    } catch (error) {
      throw new EngineFailure(errorText(error));
    } finally {
      this.#cpuMs += performance.now() - this.#sliceStart;
    }
  }

  #own(handle) {
    this.#handles.push(handle);
    return handle;
  }

  /** Evaluates `source` (JSON text on error, the value's handle otherwise). */
  #evaluate(source, name) {
    const result = this.#slice(() => this.#context.evalCode(source, name, { type: "global", strict: true }));
    if (result.error) return { error: this.#guestError(this.#own(result.error)) };
    return { value: this.#own(result.value) };
  }

  /** A QuickJS exception as the guest's error text. */
  #guestError(handle) {
    try {
      // Dumping may run guest code (getters, toJSON): a slice like any other.
      const value = this.#slice(() => this.#context.dump(handle));
      return value && typeof value === "object" && typeof value.message === "string" ? value.message : String(value);
    } catch {
      return "a value that cannot be shown was thrown";
    }
  }

  /** The guest's reply (JSON text), once the harness's promise settles. */
  async reply(harness) {
    const reply = await this.#settle(harness);
    // Once interrupted, the run is over whatever the harness made of it.
    if (this.#interrupted) return JSON.stringify({ error: `the code ran out of CPU time (at most ${this.#limits.cpuMs} ms)` });
    // Out of memory may surface as any error (even a thrown null): say which.
    if (this.#engine.refusals > this.#refusals && JSON.parse(reply).error !== undefined) {
      return JSON.stringify({ error: `out of memory: the sandbox's memory is at most ${this.#limits.memoryBytes} bytes` });
    }
    return reply;
  }

  async #settle(harness) {
    try {
      const prelude = this.#evaluate(PRELUDE, "prelude.js");
      if (prelude.error !== undefined) throw new EngineFailure(prelude.error);
      const wait = this.#own(this.#context.newFunction("wait", (id, ms) => this.#wait(id, ms)));
      const cancel = this.#own(this.#context.newFunction("cancel", (id) => this.#cancel(id)));
      // The library owns what a host function returns.
      const codecs = this.#own(this.#context.newFunction("codecs", () => this.#context.evalCode(CODECS, "codecs.js", { type: "global", strict: true })));
      const ready = this.#slice(() => this.#context.callFunction(prelude.value, this.#context.undefined, wait, cancel, codecs));
      if (ready.error) throw new EngineFailure(this.#guestError(this.#own(ready.error)));
      this.#own(ready.value);
      const entry = this.#evaluate(`(function (host) {\n"use strict";\n${harness}\nreturn run(host);\n})`, "guest.js");
      if (entry.error !== undefined) return JSON.stringify({ error: entry.error });
      const host = this.#own(this.#context.newObject());
      const call = this.#own(this.#context.newFunction("call", (path, args) => this.#call(path, args)));
      this.#context.setProp(host, "call", call);
      const started = this.#slice(() => this.#context.callFunction(entry.value, this.#context.undefined, host));
      if (started.error) return JSON.stringify({ error: this.#guestError(this.#own(started.error)) });
      const promise = this.#own(started.value);
      for (;;) {
        const jobs = this.#slice(() => this.#runtime.executePendingJobs());
        if (jobs.error) return JSON.stringify({ error: this.#guestError(this.#own(jobs.error)) });
        const state = this.#context.getPromiseState(promise);
        if (state.type === "fulfilled") {
          const value = this.#own(state.value);
          return checkReply(this.#context.typeof(value) === "string" ? this.#context.getString(value) : undefined);
        }
        if (state.type === "rejected") return JSON.stringify({ error: this.#guestError(this.#own(state.error)) });
        if (this.#pending.size === 0) {
          return JSON.stringify({ error: "the code hung: its promise can never settle (it awaits nothing the host is doing)" });
        }
        await new Promise((resolve) => (this.#wake = resolve));
        if (this.#closed) return JSON.stringify({ error: "the run is over" });
      }
    } catch (error) {
      this.#failed = true;
      return JSON.stringify({ error: `the embedded sandbox failed: ${errorText(error)}` });
    }
  }

  /** A promise settled with `text` once `answer` resolves to it (nothing once the run is over). */
  #promise(answer) {
    const context = this.#context;
    const deferred = context.newPromise();
    this.#pending.add(deferred);
    answer.then((text) => {
      if (this.#closed || !deferred.alive) return;
      this.#pending.delete(deferred);
      try {
        context.newString(text).consume((value) => deferred.resolve(value));
      } catch {
        // Out of the guest's memory: the promise stays pending, the run hangs and says so.
      } finally {
        deferred.dispose();
      }
      this.#wake?.();
    });
    return deferred;
  }

  /** The prelude's `wait(id, ms)`: timer `id`, resolved `ms` later on the host's clock. */
  #wait(idHandle, msHandle) {
    const id = this.#context.getNumber(idHandle);
    let timer;
    const deferred = this.#promise(new Promise((resolve) => (timer = setTimeout(resolve, this.#context.getNumber(msHandle), ""))));
    this.#timers.set(id, { timer, deferred });
    return deferred.handle;
  }

  /** The prelude's `cancel(id)`: the timer never fires, and no longer keeps the run waiting. */
  #cancel(idHandle) {
    const id = this.#context.getNumber(idHandle);
    const entry = this.#timers.get(id);
    if (!entry) return;
    this.#timers.delete(id);
    clearTimeout(entry.timer);
    if (!entry.deferred.alive) return;
    this.#pending.delete(entry.deferred);
    entry.deferred.dispose();
    this.#wake?.();
  }

  /** The guest's `host.call(path, argsJson)`: a promise the dispatch settles. */
  #call(pathHandle, argsHandle) {
    const context = this.#context;
    const path = context.typeof(pathHandle) === "string" ? context.getString(pathHandle) : undefined;
    const args = context.typeof(argsHandle) === "string" ? context.getString(argsHandle) : undefined;
    const deferred = this.#promise(answerCall(this.#closed ? undefined : this.#dispatch, path, args));
    return deferred.handle;
  }

  /** Releases the run's engine objects; false when the engine is broken. */
  close() {
    this.#closed = true;
    this.#wake?.();
    try {
      for (const { timer } of this.#timers.values()) clearTimeout(timer);
      for (const deferred of this.#pending) deferred.dispose();
      this.#pending.clear();
      for (const handle of this.#handles.reverse()) if (handle.alive) handle.dispose();
      this.#context.dispose();
      this.#runtime.dispose();
    } catch {
      this.#failed = true;
    }
    return !this.#failed;
  }
}
