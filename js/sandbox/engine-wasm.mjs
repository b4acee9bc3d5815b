// `shiitake/sandbox-engine`: imported by a Worker whose Agents run
// `tools().sandbox: "embedded"`, it registers the embedded sandbox's engine
// (QuickJS) as a compiled WebAssembly.Module. A Worker cannot compile wasm
// bytes at runtime, so the bundle carries it as a CompiledWasm module:
// scripts/bundle.mjs copies it as `quickjs.wasm`; with wrangler, a rule
// `{ type = "CompiledWasm", globs = ["**/quickjs-wasmfile-release-sync/wasm"], fallthrough = true }`
// (the specifier does not end in `.wasm`). Node needs no import (js/node.mjs).
import engine from "@jitl/quickjs-wasmfile-release-sync/wasm";
import { EmbeddedSandbox } from "./embedded.mjs";
import { registerEmbeddedSandbox } from "./registry.mjs";

// Released when no run is in flight: its linear memory counts against the
// isolate's (js/sandbox/embedded.mjs, EmbeddedSandbox).
registerEmbeddedSandbox(() => new EmbeddedSandbox({ wasmModule: engine, keepEngine: false }));
