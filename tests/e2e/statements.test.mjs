// What a plain turn asks of SQLite in a real Durable Object (issue 17's
// bound: at most 8 `sql.exec` calls and 8 rows written from admission to
// settlement; issue 38's usage ledger adds at most one of each: its row, in
// the write that settles the turn), for the demo Agent (fleet, files, browser bridge, tool
// modules), and a usage ledger read its two statements, of one Session or
// all; with an extension roster, the turn's end costs no second
// reconciliation and the extensions' status rows and timers are kept
// between turns. Host work, mail and extensions add no
// reconciliation to a turn that leaves them nothing to do. A fresh store
// holds the core tables only. Joining the fleet's directory costs a store
// its mark at its second start (the table, its record and a row) and one
// read at each start after.
// Counted until 200 ms after the settled frame (a watch: no read of its own).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { eventually, expectAccepted, expectError, useWorker } from "./helpers.mjs";

const T = { timeout: 90_000 };
const TURNS = 3;

async function plainTurns(h) {
  const a = h.agent();
  const sid = await a.createSession("s");
  await a.settle(sid, "warm", "warm up"); // the first turn opens the store
  const watch = await a.watch(sid);
  const counts = [];
  for (let i = 0; i < TURNS; i++) {
    assert.equal((await h.api("POST", `/direct/${a.id}/host/reset`)).status, 200);
    const commandId = await a.admit(sid, `p${i}`, `plain ${i}`);
    await watch.until((ev) => ev.event === "frame" && ev.data?.type === "settled" && ev.data.settlement.commandId === commandId, 20_000);
    await new Promise((r) => setTimeout(r, 200));
    counts.push((await h.api("GET", `/direct/${a.id}/host/stats`)).json);
  }
  await watch.close();
  return counts;
}

const RECONCILE = "FROM commands c INDEXED BY commands_unsettled WHERE c.settled_at IS NULL";
const SETTLE = "UPDATE commands SET state = 'settled'";
const count = (stats, text) => stats.texts.filter((t) => t.includes(text)).length;

describe("statements per plain turn: the demo Agent", () => {
  const h = useWorker({ fixture: "statements-worker", model: "echo" });

  test("at most 9 sql.exec calls and 8 rows written, admission to settlement, the ledger's row one of them; one reconciliation", T, async () => {
    for (const stats of await plainTurns(h)) {
      const listing = stats.texts.join("\n");
      assert.ok(stats.statements <= 9, `${stats.statements} statements:\n${listing}`);
      assert.ok(stats.rowsWritten <= 8, `${stats.rowsWritten} rows written:\n${listing}`);
      assert.equal(count(stats, "INSERT INTO shiitake_usage"), 1, `the model call's ledger row:\n${listing}`);
      // Host work and mail passes ending meanwhile read no turn.
      assert.equal(count(stats, RECONCILE), 1, listing);
      assert.equal(count(stats, SETTLE), 1, listing);
    }
  });

  test("a usage ledger read costs two statements (the totals, a page of groups; one without groupBy), of one Session (sessionId) or of all", T, async () => {
    const a = h.agent();
    const sid = await a.createSession("s");
    await a.settle(sid, "p", "one call");
    await new Promise((r) => setTimeout(r, 200)); // the turn's tail
    for (const query of ["", "groupBy=day", "sessionId=s", "sessionId=s&groupBy=model&from=0", "sessionId=never-made&groupBy=session"]) {
      assert.equal((await h.api("POST", `/direct/${a.id}/host/reset`)).status, 200);
      const ledger = await a.api("GET", `/usage?${query}`);
      assert.equal(ledger.status, 200, ledger.text);
      const stats = (await h.api("GET", `/direct/${a.id}/host/stats`)).json;
      const listing = stats.texts.join("\n");
      const statements = query.includes("groupBy") ? 2 : 1;
      assert.equal(stats.statements, statements, `${query}:\n${listing}`);
      assert.equal(count(stats, "FROM shiitake_usage"), statements, `${query}:\n${listing}`);
      assert.equal(count(stats, "session_id = ?"), query.includes("sessionId") ? statements : 0, `${query}:\n${listing}`);
    }
  });
});

describe("opening a fresh demo Agent", () => {
  const h = useWorker({ fixture: "statements-worker", model: "echo" });

  test("a read that opens a fresh Agent costs 3 statements: the catalog, the schema, the read", T, async () => {
    const a = h.agent();
    assert.equal((await a.api("GET", "/sessions/missing")).status, 404);
    await new Promise((r) => setTimeout(r, 200)); // the instance's start, if it read anything
    const stats = (await h.api("GET", `/direct/${a.id}/host/stats`)).json;
    const listing = stats.texts.join("\n");
    assert.equal(stats.statements, 3, listing);
    assert.equal(count(stats, "FROM sqlite_master"), 1, listing);
    // A store created now holds no turn, mail or outbox entry to look for.
    assert.equal(count(stats, "FROM commands"), 0, listing);
    assert.equal(count(stats, "CREATE TABLE"), 1, `one schema text:\n${listing}`);
    // The core tables only: each side table comes with its first write.
    const { tables } = (await h.api("GET", `/direct/${a.id}/host/tables`)).json;
    assert.deepEqual(tables, ["commands", "fences", "messages", "session_grants", "sessions", "shiitake_meta"]);
  });
});

describe("the demo Agent joins the fleet's directory once per store", () => {
  const h = useWorker({ fixture: "statements-worker", model: "echo", persist: true });
  const MEMBER = "shiitake_fleet_member";
  const stats = async (a) => (await h.api("GET", `/direct/${a.id}/host/stats`)).json;

  test("its opening request writes nothing for it, its next start marks it joined, a later start only reads the mark", T, async () => {
    const a = h.agent();
    assert.equal((await a.api("GET", "/sessions/missing")).status, 404);
    await new Promise((r) => setTimeout(r, 200));
    const opening = await stats(a);
    // No text names the table: a store made now has none.
    assert.equal(count(opening, MEMBER), 0, opening.texts.join("\n"));
    await h.restart();
    assert.equal((await a.api("GET", "/sessions/missing")).status, 404);
    const second = await eventually(async () => {
      const now = await stats(a);
      return count(now, `INSERT INTO ${MEMBER}`) === 1 ? now : null;
    }, { what: "the mark" });
    assert.equal(count(second, `INSERT INTO ${MEMBER}`), 1, second.texts.join("\n"));
    await h.restart();
    assert.equal((await a.api("GET", "/sessions/missing")).status, 404);
    await new Promise((r) => setTimeout(r, 200));
    const third = await stats(a);
    const listing = third.texts.join("\n");
    assert.equal(count(third, `SELECT value FROM ${MEMBER}`), 1, `one read of the mark:\n${listing}`);
    assert.equal(count(third, `INSERT INTO ${MEMBER}`), 0, `no write:\n${listing}`);
  });
});

describe("statements per plain turn: the demo Agent with an extension roster", () => {
  const h = useWorker({ fixture: "statements-worker", model: "echo", bindings: { STATEMENTS_EXTENSIONS: "1" } });

  test("the turn's end costs no second reconciliation; status rows and timers are read once, not per turn", T, async () => {
    for (const stats of await plainTurns(h)) {
      const listing = stats.texts.join("\n");
      assert.equal(count(stats, RECONCILE), 1, listing);
      assert.equal(count(stats, SETTLE), 1, listing);
      // Neither changed since the warm-up turn: the kept reads answer.
      assert.equal(count(stats, "FROM shiitake_extensions"), 0, `no status row read:\n${listing}`);
      assert.equal(count(stats, "FROM shiitake_ext_timers"), 0, `no timer read:\n${listing}`);
      // The plain turn's 9, plus the prompt builder's state and Session position.
      assert.ok(stats.statements <= 11, `${stats.statements} statements:\n${listing}`);
    }
  });
});

// Budgets (issue 38 item 3; target: the ledger and the budget check add at
// most one row and one statement to a plain turn). The ledger's row is the
// plain turn's own (above); an Agent with no budget pays nothing more. With
// one (configured or set), each turn pays what these pin, measured: 1 more
// statement and 4 more rows: the model call's gate is one statement that
// checks both budgets and charges both counters (2 rows); the ledger row
// of its outcome carries the charge, and the budget group's trigger
// replaces it there with the reported tokens (2 rows, no statement). The
// claim pass's read of the paused turns is kept between passes
// (sql::cached_read): read at the first pass after the budget tables are
// made (the first turn measured here), then no more while none pauses or
// resumes. The rows miss the target: a crash-exact budget charges each
// call before it is sent and corrects it after, in both counters.
const BUDGET_TABLES = ["shiitake_budgets", "shiitake_spend", "shiitake_paused"];
// Statement texts are shortened (bench/sql-counter.mjs): "shiitake_bu" is the budgets'.
const budgetText = (t) => /shiitake_(bu|spend|paused)/.test(t);
const BUDGET_TURN = [["INSERT INTO shiitake_spend", 1, 2]];

describe("statements per plain turn: an Agent with no budget pays nothing for budgets", () => {
  const h = useWorker({ fixture: "statements-worker", model: "echo" });

  test("no statement names a budget table, and its store holds none", T, async () => {
    for (const stats of await plainTurns(h)) {
      const listing = stats.texts.join("\n");
      assert.deepEqual(stats.texts.filter(budgetText), [], listing);
    }
    const a = h.agent();
    await a.createSession("s");
    await a.settle("s", "p", "one call");
    const { tables } = (await h.api("GET", `/direct/${a.id}/host/tables`)).json;
    assert.deepEqual(tables.filter((t) => BUDGET_TABLES.includes(t)), []);
  });
});

for (const [name, bindings] of [
  ["a daily budget configured", { SHIITAKE_BUDGET_DAILY_TOKENS: 1_000_000_000 }],
  ["a Session budget configured", { SHIITAKE_BUDGET_SESSION_TOKENS: 1_000_000_000 }],
]) {
  describe(`statements per plain turn: the demo Agent with ${name}`, () => {
    const h = useWorker({ fixture: "statements-worker", model: "echo", bindings });

    test("1 statement and 4 rows more than with none (the target is one of each): the ones these name", T, async () => {
      for (const [turn, stats] of (await plainTurns(h)).entries()) {
        const listing = stats.texts.map((t, i) => `${stats.rows[i]} ${t}`).join("\n");
        console.log(`# ${name}: ${stats.statements} statements, ${stats.rowsWritten} rows written per plain turn`);
        // The paused turns are read once (kept after), at the first turn's pass.
        const pausedReads = count(stats, "FROM shiitake_paused");
        assert.equal(pausedReads, turn === 0 ? 1 : 0, listing);
        const mine = stats.texts.map((t, i) => [t, stats.rows[i]]).filter(([t]) => budgetText(t) && !t.includes("FROM shiitake_paused"));
        assert.equal(mine.length, 1, listing);
        for (const [text, statements, rows] of BUDGET_TURN) {
          const these = mine.filter(([t]) => t.includes(text));
          assert.equal(these.length, statements, `${text}:\n${listing}`);
          assert.equal(these.reduce((n, [, r]) => n + r, 0), rows, `${text}'s rows:\n${listing}`);
        }
        // The plain turn's bound (above), plus these.
        assert.ok(stats.statements <= 9 + 1 + pausedReads, `${stats.statements} statements:\n${listing}`);
        assert.ok(stats.rowsWritten <= 7 + 4, `${stats.rowsWritten} rows written:\n${listing}`);
        assert.equal(count(stats, "INSERT INTO shiitake_usage"), 1, listing);
        // The ledger's row and the trigger's two counters.
        const ledgerRows = stats.rows[stats.texts.findIndex((t) => t.includes("INSERT INTO shiitake_usage"))];
        assert.equal(ledgerRows, 3, listing);
        assert.equal(count(stats, RECONCILE), 1, listing);
        assert.equal(count(stats, SETTLE), 1, listing);
      }
    });
  });
}

describe("a queued prompt: the demo Agent", () => {
  const h = useWorker({ fixture: "statements-worker", model: "hold" });

  test("into a Session whose queue is kept: one sql.exec, its insert; a replay on it fails that insert on its requestId, writes nothing and is answered from a read", T, async () => {
    const { a, sid } = await h.occupied();
    const counted = async (send) => {
      assert.equal((await h.api("POST", `/direct/${a.id}/host/reset`)).status, 200);
      const reply = await send();
      return { reply, stats: (await h.api("GET", `/direct/${a.id}/host/stats`)).json };
    };
    const first = await counted(() => a.prompt(sid, "q0", "queued 0"));
    expectAccepted(first.reply);
    assert.equal(first.stats.statements, 2, `a read, then the insert:\n${first.stats.texts.join("\n")}`);
    const kept = await counted(() => a.prompt(sid, "q1", "queued 1"));
    const q1 = expectAccepted(kept.reply);
    assert.equal(kept.stats.statements, 1, kept.stats.texts.join("\n"));
    assert.match(kept.stats.texts[0], /^INSERT INTO commands/);
    assert.equal(kept.stats.rowsWritten, first.stats.rowsWritten, "the same insert (the row and its two index entries)");
    const replay = await counted(() => a.prompt(sid, "q1", "queued 1"));
    assert.equal(expectAccepted(replay.reply), q1, "the first receipt");
    assert.equal(replay.stats.rowsWritten, 0, replay.stats.texts.join("\n"));
    expectError(await a.prompt(sid, "q1", "another text"), 409, "request_conflict");
    const pending = await a.pending(sid);
    assert.deepEqual(
      pending.map((p) => [p.requestId, p.text]),
      [
        ["q0", "queued 0"],
        ["q1", "queued 1"],
      ],
    );
    // The Agent goes on serving: the next prompt is admitted once.
    expectAccepted(await a.prompt(sid, "q2", "queued 2"));
    assert.equal((await a.pending(sid)).length, 3);
  });
});
