// The Worker crash.mjs runs under `wrangler dev`: the demo entry (bearer
// auth, shiitakeApp at /agents/:agentId) with one tool whose effect is
// recorded outside the process that gets killed: `effects.record-effect`
// POSTs its key to the harness (EFFECT_URL), which appends it to a file.
// It is unsafe to replay and offered both directly (`record_effect`) and
// through `execute`.
import demo from "../../js/demo.mjs";
import { ShiitakeDO as Base } from "../../js/index.mjs";

export class ShiitakeDO extends Base {
  tools() {
    const effectUrl = this.env.EFFECT_URL;
    return {
      modules: [
        {
          id: "effects",
          operations: [
            {
              name: "record-effect",
              description: "Records an effect under `key` (once per call).",
              inputSchema: { type: "object", properties: { key: { type: "string", maxLength: 128 } }, required: ["key"] },
              access: "write",
              replaySafe: false,
              direct: true,
              async run({ key }, ctx) {
                const res = await fetch(effectUrl, {
                  method: "POST",
                  headers: { "content-type": "application/json" },
                  body: JSON.stringify({ key, commandId: ctx.commandId, executionId: ctx.executionId }),
                  signal: ctx.signal,
                });
                if (!res.ok) throw new Error(`effect server answered ${res.status}`);
                return { recorded: key };
              },
            },
          ],
        },
      ],
    };
  }
}

export default demo;
