/**
 * A Computer reached through a Worker service binding or a URL (the protocol
 * of docs/computers.md). The transport only moves bytes: the core decides
 * what an advertisement or a reply means.
 */

/** Bytes of one response body the transport reads (4194304); one more is refused as oversized. */
export declare const COMPUTER_RESPONSE_BYTES_MAX: number;

/** What carries the requests: a service binding, or any object with `fetch(request)`. */
export interface ComputerFetcher {
  fetch(request: Request): Promise<Response>;
}

export interface ServiceComputerOptions {
  /** The Computer's Worker (a service binding). Absent: the global `fetch` with `url`. */
  fetcher?: ComputerFetcher;
  /**
   * The base the steps are posted under (`<url>/advertise`, `<url>/call`);
   * default `https://computer.invalid` (a service binding ignores the host).
   */
  url?: string;
  /**
   * Sent with every request (e.g. `authorization: Bearer ...`). Their values
   * are credentials: replaced by `<redacted>` in every message the transport
   * makes, whole and by each token of at least 8 bytes; in a body it hands
   * back, those of at least 8 bytes (a short value cannot corrupt a result).
   */
  headers?: HeadersInit;
}

/** The context of one call (the core's invocation, plus the call's abort signal). */
export interface ComputerCallContext {
  /** Names this one call: `<commandId>:<callId>:<n>`, the n-th guest call (from 1) of the `execute` run `callId`. */
  executionId: string;
  sessionId: string;
  commandId: string;
  /** When the call must end, ms since the epoch: the request is aborted then. */
  deadlineMs: number;
  /** Aborting it aborts the request. */
  signal?: AbortSignal;
}

export interface ServiceComputer {
  /**
   * `POST <url>/advertise`: resolves to the advertisement's JSON text as sent
   * (a 2xx body within the bound); rejects with an Error naming the HTTP
   * status (and the provider's `{error}` message), a refused redirect, an
   * oversized body, a failed or aborted request.
   */
  describe(options?: { signal?: AbortSignal }): Promise<string>;
  /**
   * `POST <url>/call`: resolves to JSON text: the Computer's 2xx body as
   * sent (`{"result": ...}` or `{"error": "..."}`), or `{"error": "..."}`
   * saying why the call failed (HTTP status, redirect, oversized body,
   * aborted, deadline passed). Never rejects.
   */
  call(operation: string, argsJson: string, ctx: ComputerCallContext): Promise<string>;
}

export declare function serviceComputer(options?: ServiceComputerOptions): ServiceComputer;
