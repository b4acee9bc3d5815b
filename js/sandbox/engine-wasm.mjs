// The embedded sandbox's engine (QuickJS) as a compiled WebAssembly.Module,
// imported as a module: a Worker cannot compile wasm bytes at runtime, so the
// bundle carries it as a CompiledWasm module (scripts/bundle.mjs copies it
// as `quickjs.wasm`); Node gets it compiled by js/node.mjs's module hooks.
export { default } from "@jitl/quickjs-wasmfile-release-sync/wasm";
