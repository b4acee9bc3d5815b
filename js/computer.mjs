// A Computer reached through a Worker service binding or a URL: the
// transport of docs/computers.md. It only moves bytes: the advertisement and
// each call's reply go back as JSON text, and the core (src/computer/)
// decides what they mean. What it does on its own: bounded bodies (one byte
// past COMPUTER_RESPONSE_BYTES_MAX tells an oversized one), redirects
// refused, the call aborted when its signal fires or its deadline passes,
// and the configured header values (credentials) kept out of every message
// and body it hands back.
import { readBounded } from "./bounded.mjs";
import { COMPUTER_RESPONSE_BYTES_MAX, SECRET_FRAGMENT_BYTES_MIN } from "./limits.mjs";

export { COMPUTER_RESPONSE_BYTES_MAX };
/** Bytes of a provider's error message quoted in an error. */
const DETAIL_BYTES_MAX = 1_024;
const REDACTED = "<redacted>";
/** A token of a header value at least this long is redacted on its own too. */
const SECRET_TOKEN_BYTES_MIN = SECRET_FRAGMENT_BYTES_MIN;

/**
 * @param {{ fetcher?: { fetch(request: Request): Promise<Response> }, url?: string, headers?: HeadersInit }} [options]
 */
export function serviceComputer({ fetcher, url = "https://computer.invalid", headers } = {}) {
  const base = String(url).replace(/\/+$/, "");
  const send = fetcher ? (request) => fetcher.fetch(request) : (request) => fetch(request);
  const extra = new Headers(headers ?? {});
  // Messages lose every header value; bodies (results, which a short value
  // such as `1` would corrupt) the values and tokens of 8 bytes or more.
  const redact = redactor([...extra.values()], 1);
  const redactBody = redactor([...extra.values()], SECRET_TOKEN_BYTES_MIN);

  // One POST: { status, text } for a body within the bound, else throws an
  // Error whose message names the step and never holds a header value.
  async function post(step, body, signal) {
    const requestHeaders = new Headers(extra);
    requestHeaders.set("content-type", "application/json");
    let response;
    try {
      response = await send(new Request(`${base}/${step}`, { method: "POST", headers: requestHeaders, body, redirect: "manual", signal }));
    } catch (error) {
      if (signal?.aborted) throw new ComputerError(`Computer ${step}: ${reasonOf(signal)}`);
      throw new ComputerError(`Computer ${step} failed: ${redact(String(error?.message ?? error))}`);
    }
    if (response.status >= 300 && response.status < 400) {
      await response.body?.cancel().catch(() => {});
      throw new ComputerError(`Computer answered HTTP ${response.status} to ${step}: redirects are refused; configure the Computer's final URL`);
    }
    let bytes;
    try {
      bytes = await readBounded(response, COMPUTER_RESPONSE_BYTES_MAX + 1);
    } catch (error) {
      if (signal?.aborted) throw new ComputerError(`Computer ${step}: ${reasonOf(signal)}`);
      throw new ComputerError(`Computer ${step}: reading the HTTP ${response.status} response failed: ${redact(String(error?.message ?? error))}`);
    }
    if (bytes.byteLength > COMPUTER_RESPONSE_BYTES_MAX) {
      throw new ComputerError(`Computer's ${step} response (HTTP ${response.status}) is larger than ${COMPUTER_RESPONSE_BYTES_MAX} bytes`);
    }
    const text = new TextDecoder().decode(bytes);
    if (response.status < 200 || response.status >= 300) {
      const auth = response.status === 401 || response.status === 403 ? " (the Computer refused the call's credentials or admission)" : "";
      throw new ComputerError(`Computer answered HTTP ${response.status} to ${step}${auth}${detailOf(text, redact)}`);
    }
    return redactBody(text);
  }

  return {
    /** The advertisement's JSON text; rejects with an Error saying why not. */
    async describe({ signal } = {}) {
      return post("advertise", "{}", signal);
    },

    /** `{"result": ...}` (as the Computer sent it) or `{"error": "..."}`, as JSON text; never rejects. */
    async call(operation, argsJson, ctx = {}) {
      const { executionId, sessionId, commandId, deadlineMs, signal } = ctx;
      let body;
      try {
        body = JSON.stringify({ operation, arguments: JSON.parse(argsJson), executionId, sessionId, commandId, deadlineMs });
      } catch (error) {
        return failure(`Computer call: the arguments are not JSON: ${String(error?.message ?? error)}`);
      }
      const left = Number(deadlineMs) - Date.now();
      if (!(left > 0)) return failure("Computer call: its deadline passed before it was sent");
      if (signal?.aborted) return failure(`Computer call: ${reasonOf(signal)}`);
      const deadline = AbortSignal.timeout(Math.min(left, 2_147_483_647));
      const combined = signal ? AbortSignal.any([signal, deadline]) : deadline;
      try {
        return await post("call", body, combined);
      } catch (error) {
        // post's messages are redacted; anything else is a bug, said as such.
        return failure(error instanceof ComputerError ? error.message : `Computer call failed: ${redact(String(error?.message ?? error))}`);
      }
    },
  };
}

class ComputerError extends Error {
  name = "ComputerError";
}

const failure = (message) => JSON.stringify({ error: message });

function reasonOf(signal) {
  const name = signal.reason?.name;
  return name === "TimeoutError" ? "its deadline passed; the request was aborted" : "the request was aborted";
}

// ": <the provider's error message>" (redacted, then cut) when the body is
// `{ "error": "..." }`, else "".
function detailOf(text, redact) {
  let message;
  try {
    message = JSON.parse(text)?.error;
  } catch {
    return "";
  }
  if (typeof message !== "string" || message === "") return "";
  return `: ${cut(redact(message), DETAIL_BYTES_MAX)}`;
}

// At most `max` UTF-8 bytes of `text`, ending in "…" when cut.
function cut(text, max) {
  const bytes = new TextEncoder().encode(text);
  if (bytes.byteLength <= max) return text;
  const kept = new TextDecoder().decode(bytes.subarray(0, max - 3)).replace(/\uFFFD+$/, "");
  return `${kept}…`;
}

// Replaces every configured header value, and every token of one (the token
// after "Bearer "), of at least `minBytes` bytes (tokens: at least
// SECRET_TOKEN_BYTES_MIN) with "<redacted>": as written and as a JSON string
// escapes it, so a body stays valid JSON.
function redactor(values, minBytes) {
  const size = (text) => new TextEncoder().encode(text).byteLength;
  const secrets = new Set();
  for (const raw of values) {
    const value = raw.trim();
    if (value.length > 0 && size(value) >= minBytes) secrets.add(value);
    for (const token of value.split(/\s+/)) if (size(token) >= Math.max(minBytes, SECRET_TOKEN_BYTES_MIN)) secrets.add(token);
  }
  const forms = [];
  for (const secret of secrets) {
    forms.push(secret);
    const escaped = JSON.stringify(secret).slice(1, -1);
    if (escaped !== secret) forms.push(escaped);
  }
  forms.sort((a, b) => b.length - a.length);
  return (text) => {
    let out = text;
    for (const form of forms) out = out.replaceAll(form, REDACTED);
    return out;
  };
}
