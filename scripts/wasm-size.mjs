#!/usr/bin/env node
// Where the wasm's bytes go (a name-section reader; no twiggy needed):
//
//   node scripts/wasm-size.mjs crates FILE.wasm
//     attributes every function body of FILE.wasm (built with
//     SHIITAKE_WASM_NAMES=1, so the name section names them) to the crate its
//     demangled name belongs to, and prints raw bytes and the gzip -9 size of
//     each crate's bodies compressed on their own (an estimate: the real wasm
//     compresses across crates), plus data, the rest and the total;
//
//   node scripts/wasm-size.mjs modules FILE.wasm
//     the same with shiitake's own functions grouped by module;
//
//   node scripts/wasm-size.mjs functions FILE.wasm
//     every function: body bytes, group and name (sort -rn for the largest);
//
//   bash scripts/wasm-size.sh
//     builds the variants (default, lean, feature off) and prints measured
//     gzip sizes: removal is the exact figure where a dependency can go.
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

const gz = (buf) => gzipSync(buf, { level: 9 }).length;

function leb(buf, at) {
  let result = 0;
  let shift = 0;
  for (;;) {
    const byte = buf[at++];
    result += (byte & 0x7f) * 2 ** shift;
    shift += 7;
    if (!(byte & 0x80)) return [result, at];
  }
}

function sections(buf) {
  const out = [];
  let at = 8;
  while (at < buf.length) {
    const id = buf[at++];
    let size;
    [size, at] = leb(buf, at);
    const start = at;
    let name = null;
    let body = start;
    if (id === 0) {
      let len;
      [len, body] = leb(buf, start);
      name = buf.subarray(body, body + len).toString("utf8");
      body += len;
    }
    out.push({ id, name, start, body, end: start + size });
    at = start + size;
  }
  return out;
}

function importedFunctions(buf, s) {
  let [count, at] = leb(buf, s.start);
  let funcs = 0;
  for (let i = 0; i < count; i++) {
    for (let k = 0; k < 2; k++) {
      let len;
      [len, at] = leb(buf, at);
      at += len;
    }
    const kind = buf[at++];
    if (kind === 0) {
      funcs++;
      [, at] = leb(buf, at);
    } else if (kind === 1) {
      at++; // reftype
      const flags = buf[at++];
      [, at] = leb(buf, at);
      if (flags & 1) [, at] = leb(buf, at);
    } else if (kind === 2) {
      const flags = buf[at++];
      [, at] = leb(buf, at);
      if (flags & 1) [, at] = leb(buf, at);
    } else if (kind === 3) {
      at += 2;
    } else if (kind === 4) {
      at++;
      [, at] = leb(buf, at);
    } else throw new Error(`import kind ${kind}`);
  }
  return funcs;
}

function functionNames(buf, s) {
  const names = new Map();
  let at = s.body;
  while (at < s.end) {
    const sub = buf[at++];
    let size;
    [size, at] = leb(buf, at);
    if (sub === 1) {
      let count;
      let p = at;
      [count, p] = leb(buf, p);
      for (let i = 0; i < count; i++) {
        let idx, len;
        [idx, p] = leb(buf, p);
        [len, p] = leb(buf, p);
        names.set(idx, buf.subarray(p, p + len).toString("utf8"));
        p += len;
      }
    }
    at += size;
  }
  return names;
}

// The crates we report on; anything else is grouped as "other".
const GROUPS = [
  ["boon", /\bboon::/],
  ["regex (regex, regex-automata, regex-syntax, aho-corasick, memchr)", /\b(regex|regex_automata|regex_syntax|aho_corasick|memchr)::/],
  ["ignore + globset (+ bstr)", /\b(ignore|globset|bstr|same_file|walkdir)::/],
  ["serde_json (+ zmij, itoa)", /\b(serde_json|zmij|itoa)::/],
  ["serde_path_to_error", /\bserde_path_to_error::/],
  ["sha2 (+ digest, block-buffer)", /\b(sha2|digest|block_buffer|generic_array|crypto_common)::/],
  ["wasm-bindgen, js-sys, web-sys, futures", /\b(wasm_bindgen|wasm_bindgen_futures|js_sys|web_sys|futures_util|futures_core|futures_channel|futures_task|futures_executor|getrandom)\b/],
  ["url, idna, percent-encoding, fluent-uri, ahash, other deps of boon", /\b(url|idna|percent_encoding|form_urlencoded|fluent_uri|borrow_or_share|ahash|appendlist|once_cell|unicode_normalization|unicode_bidi|icu_\w+|zerovec|tinystr|writeable|yoke|litemap|smallvec|utf8_iter|idna_adapter)::/],
  ["thiserror", /\bthiserror::/],
];

function crateOf(mangled) {
  const name = mangled.replace(/\[[0-9a-f]{16}\]/g, "");
  // The crate whose code this is: the first reported crate the demangled
  // name mentions, shiitake's own code (serde derives included) when it
  // names shiitake first, std otherwise.
  let best = null;
  let bestAt = Infinity;
  for (const [group, re] of GROUPS) {
    const m = re.exec(name);
    if (m && m.index < bestAt) {
      best = group;
      bestAt = m.index;
    }
  }
  const own = /\bshiitake::/.exec(name);
  if (own && own.index < bestAt) {
    return /\bserde(_core)?::/.test(name) ? "shiitake: serde derives" : "shiitake";
  }
  if (best) return best;
  if (/\bserde(_core)?::/.test(name)) return "serde";
  if (/\b(core|alloc|std|hashbrown|compiler_builtins|dlmalloc|__rustc)::|^</.test(name) || !/::/.test(name)) {
    if (/\bcore::fmt::|\bfmt::/.test(name)) return "std: core::fmt";
    return "std (core, alloc, std, allocator)";
  }
  return "other";
}

// shiitake's own functions by module (two levels: `host::fleet`), the rest
// by crate as above.
function moduleOf(mangled) {
  const group = crateOf(mangled);
  if (!group.startsWith("shiitake")) return group;
  const name = mangled.replace(/\[[0-9a-f]{16}\]/g, "");
  const m = /\bshiitake::([a-z_]+)(::[a-z_]+)?/.exec(name);
  return m ? `shiitake::${m[1]}${m[2] ?? ""}` : group;
}

function crates(file, by = crateOf) {
  const buf = readFileSync(file);
  const secs = sections(buf);
  const imports = secs.find((s) => s.id === 2);
  const code = secs.find((s) => s.id === 10);
  const nameSec = secs.find((s) => s.id === 0 && s.name === "name");
  if (!nameSec) throw new Error(`${file} has no name section: build with SHIITAKE_WASM_NAMES=1`);
  const base = imports ? importedFunctions(buf, imports) : 0;
  const names = functionNames(buf, nameSec);
  const groups = new Map();
  let [count, at] = leb(buf, code.start);
  for (let i = 0; i < count; i++) {
    let size;
    [size, at] = leb(buf, at);
    const name = names.get(base + i) ?? "";
    const group = by(name);
    if (!groups.has(group)) groups.set(group, []);
    groups.get(group).push(buf.subarray(at, at + size));
    at += size;
  }
  const rows = [...groups].map(([group, bodies]) => {
    const all = Buffer.concat(bodies);
    return { group, functions: bodies.length, raw: all.length, gzip: gz(all) };
  });
  rows.sort((a, b) => b.gzip - a.gzip);
  const data = secs.filter((s) => s.id === 11);
  const dataBuf = Buffer.concat(data.map((s) => buf.subarray(s.start, s.end)));
  const custom = secs.filter((s) => s.id === 0);
  const customRaw = custom.reduce((n, s) => n + s.end - s.start, 0);
  const rest = buf.length - code.end + code.start - dataBuf.length - customRaw;
  const kib = (n) => (n / 1024).toFixed(1).padStart(8);
  console.log(`${file}: ${kib(buf.length)} KiB raw; functions grouped by crate (gzip of each group on its own):`);
  console.log(`${"group".padEnd(70)} ${"fns".padStart(6)} ${"KiB raw".padStart(8)} ${"KiB gz".padStart(8)}`);
  for (const r of rows) {
    console.log(`${r.group.padEnd(70)} ${String(r.functions).padStart(6)} ${kib(r.raw)} ${kib(r.gzip)}`);
  }
  console.log(`${"data segments (strings, tables: not attributed)".padEnd(70)} ${"".padStart(6)} ${kib(dataBuf.length)} ${kib(gz(dataBuf))}`);
  console.log(`${"name section (absent from the deployed wasm)".padEnd(70)} ${"".padStart(6)} ${kib(customRaw)}`);
  console.log(`${"types, imports, exports, tables".padEnd(70)} ${"".padStart(6)} ${kib(rest)}`);
}

// Every function: body bytes, group, demangled name (tab-separated).
function dump(file) {
  const buf = readFileSync(file);
  const secs = sections(buf);
  const imports = secs.find((s) => s.id === 2);
  const code = secs.find((s) => s.id === 10);
  const names = functionNames(buf, secs.find((s) => s.id === 0 && s.name === "name"));
  const base = imports ? importedFunctions(buf, imports) : 0;
  let [count, at] = leb(buf, code.start);
  for (let i = 0; i < count; i++) {
    let size;
    [size, at] = leb(buf, at);
    const name = names.get(base + i) ?? "";
    console.log(`${size}\t${crateOf(name)}\t${name}`);
    at += size;
  }
}

const [mode, file] = process.argv.slice(2);
if (mode === "crates" && file) crates(file);
else if (mode === "modules" && file) crates(file, moduleOf);
else if (mode === "functions" && file) dump(file);
else {
  console.error("usage: node scripts/wasm-size.mjs crates|modules|functions FILE.wasm");
  process.exit(2);
}
