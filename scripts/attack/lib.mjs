// What the attack scripts share: argument parsing, a violation log that sets
// the exit code, and figure tables. The HTTP client, the seeded PRNG and the
// Miniflare harness are tests/e2e/helpers.mjs's.

import { rng } from "../../tests/e2e/helpers.mjs";

/**
 * Parses `--name value` pairs (and bare `--flag`s) against `spec`
 * (`{name: default}`; numbers are parsed as integers, booleans are flags).
 * An unknown or malformed argument exits with a usage line.
 */
export function parseArgs(argv, spec, usage) {
  const out = { ...spec };
  const fail = (why) => {
    console.error(`${why}\nusage: ${usage}`);
    process.exit(2);
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--help" || arg === "-h") {
      console.log(`usage: ${usage}`);
      process.exit(0);
    }
    if (!arg.startsWith("--")) fail(`unexpected argument ${arg}`);
    const name = arg.slice(2);
    if (!(name in spec)) fail(`unknown option --${name}`);
    if (typeof spec[name] === "boolean") {
      out[name] = true;
      continue;
    }
    const value = argv[++i];
    if (value === undefined) fail(`--${name} needs a value`);
    if (typeof spec[name] === "number") {
      if (!/^\d+$/.test(value)) fail(`--${name} takes a non-negative integer, not ${value}`);
      out[name] = Number(value);
    } else {
      out[name] = value;
    }
  }
  return out;
}

/** A seed: the given one, else a random one (printed, so a failure reproduces). */
export function seedOf(args) {
  return args.seed === 0 ? Math.floor(Math.random() * 2 ** 31) + 1 : args.seed;
}

/** A seeded random source with the helpers the scripts use. */
export function random(seed) {
  const next = rng(seed);
  return {
    next,
    int: (n) => Math.floor(next() * n),
    pick: (xs) => xs[Math.floor(next() * xs.length)],
    chance: (p) => next() < p,
    shuffle(xs) {
      const a = [...xs];
      for (let i = a.length - 1; i > 0; i--) {
        const j = Math.floor(next() * (i + 1));
        [a[i], a[j]] = [a[j], a[i]];
      }
      return a;
    },
  };
}

/** Violations found so far; `finish()` exits non-zero when there is any. */
export class Violations {
  constructor(name) {
    this.name = name;
    this.list = [];
  }

  add(what) {
    this.list.push(what);
    console.error(`[${this.name}] VIOLATION: ${what}`);
  }

  /** Records `what` unless `ok`. */
  check(ok, what) {
    if (!ok) this.add(typeof what === "function" ? what() : what);
    return ok;
  }

  finish(reproduce) {
    if (this.list.length === 0) {
      console.log(`[${this.name}] OK: no violation`);
      process.exit(0);
    }
    console.error(`[${this.name}] FAILED: ${this.list.length} violation(s); reproduce with: ${reproduce}`);
    process.exit(1);
  }
}

/** Prints `rows` (`[[label, value]]`) as an aligned table under a title. */
export function table(title, rows) {
  console.log(`\n${title}`);
  const width = Math.max(...rows.map(([k]) => String(k).length));
  for (const [k, v] of rows) console.log(`  ${String(k).padEnd(width)}  ${v}`);
}

/** Runs `fn` over `items` with at most `limit` in flight; results in order. */
export async function pool(items, limit, fn) {
  const results = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
