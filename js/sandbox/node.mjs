// The embedded sandbox's engine for Node: its wasm compiled from the
// package's file (a Worker imports it as a CompiledWasm module instead).
import { readFile } from "node:fs/promises";
import { EmbeddedSandbox } from "./embedded.mjs";
import { registerEmbeddedSandbox } from "./registry.mjs";

/** The engine's wasm, compiled once per process on first use. */
let compiled;
export function engineWasmModule() {
  compiled ??= readFile(new URL(import.meta.resolve("@jitl/quickjs-wasmfile-release-sync/wasm"))).then((bytes) => WebAssembly.compile(bytes));
  return compiled;
}

/**
 * Registers {@link engineWasmModule} for `tools().sandbox: "embedded"`
 * (js/node.mjs does, at load); an Agent keeps its engine between runs (no
 * isolate memory limit here; each kept engine commits about 0.7 MiB).
 */
export function registerNodeEngine() {
  registerEmbeddedSandbox(() => new EmbeddedSandbox({ wasmModule: engineWasmModule, keepEngine: true }));
}

/** An {@link EmbeddedSandbox} on this process's engine wasm, kept between runs unless `keepEngine: false`. */
export function nodeSandbox(options = {}) {
  return new EmbeddedSandbox({ wasmModule: engineWasmModule(), keepEngine: true, ...options });
}
