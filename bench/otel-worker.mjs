// Worker for bench/otel.mjs: the plain ShiitakeDO, whose objects named
// `traced-*` export OpenTelemetry traces to BENCH_OTLP_ENDPOINT
// (`telemetry()`), the others none: the same class, the same run.
import { ShiitakeDO as Base } from "../js/do.mjs";
import { shiitakeApp } from "../js/app.mjs";
import { bearerTokenAuth } from "../js/bearer.mjs";
import { Hono } from "hono";

export class ShiitakeDO extends Base {
  telemetry() {
    return this.ctx.id.name?.startsWith("traced") ? { endpoint: this.env.BENCH_OTLP_ENDPOINT } : undefined;
  }
}

const app = new Hono();
app.use("/agents/*", ...bearerTokenAuth("SHIITAKE_TOKEN"));
app.route("/agents/:agentId", shiitakeApp({ binding: "SHIITAKE" }));
export default app;
