// Where the embedded sandbox is registered: js/sandbox/engine-wasm.mjs
// (`shiitake/sandbox-engine`, which a Worker opting in imports) or
// js/sandbox/node.mjs (Node) register a factory of EmbeddedSandbox
// (js/sandbox/embedded.mjs); js/do/hooks.mjs asks here. So only a host that
// opts in bundles the engine, its JS glue and the sandbox itself: a Worker
// bundle cannot load code lazily (esbuild inlines a dynamic import).
let newSandbox;

/** Registers `factory()`, answering a new EmbeddedSandbox for one Agent. */
export function registerEmbeddedSandbox(factory) {
  newSandbox = factory;
}

/** The registered factory, or undefined where no engine was registered. */
export function embeddedSandboxFactory() {
  return newSandbox;
}
