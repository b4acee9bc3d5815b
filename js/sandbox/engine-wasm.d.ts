// `shiitake/sandbox-engine`: imported for its effect (registers the embedded
// sandbox's engine wasm for `tools().sandbox: "embedded"`, js/do.d.ts).
export {};
