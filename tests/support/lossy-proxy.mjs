// A small HTTP proxy between a client and the service that loses what a test
// tells it to (tests/e2e/chat-page.test.mjs, chat-cli.test.mjs): a request
// dropped before it reaches the service (the client's connection is cut at
// once), or an answer dropped after the service gave it (the request was
// served and committed; the client's connection is cut instead of answered);
// or a request held back until the test lets it go (a slow network).
// Everything else passes through as it is, streams (the watch) included.
//
//   const proxy = await startLossyProxy(origin);
//   proxy.lose = ({ method, path, body }) => (path.endsWith("/commands") && body.includes(tag) ? "answer" : undefined);
//   ... the client talks to proxy.url ...
//   proxy.lost;  // [{ what, method, path, body, status? }]: what was lost
//   proxy.seen;  // [{ method, path, status }]: what was answered
//   proxy.hold = ({ method, path }) => (path.includes("?limit=6") ? released : undefined); // forwarded once `released` settles
import http from "node:http";

/** Starts a proxy to `target` (an origin) on a loopback port. */
export async function startLossyProxy(target) {
  const upstream = new URL(target);
  const sockets = new Set();
  const proxy = {
    url: "",
    /** `({method, path, body, socket}) => "request" | "answer" | undefined`: what to lose of a request. */
    lose: () => undefined,
    /** `({method, path, body}) => Promise | undefined`: a request is forwarded once the promise settles. */
    hold: () => undefined,
    lost: [],
    seen: [],
    /** Cuts every open client connection but `keep` (a socket): open watches end. */
    cut(keep) {
      for (const socket of sockets) if (socket !== keep) socket.destroy();
    },
    close: () =>
      new Promise((resolve) => {
        proxy.cut();
        server.close(resolve);
      }),
  };
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    try {
      for await (const chunk of req) chunks.push(chunk);
    } catch {
      return; // the client left
    }
    const body = Buffer.concat(chunks);
    const request = { method: req.method, path: req.url, body: body.toString("utf8") };
    const what = proxy.lose({ ...request, socket: req.socket });
    if (what === "request") {
      proxy.lost.push({ what, ...request });
      req.socket.destroy();
      return;
    }
    await proxy.hold(request);
    const up = http.request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers });
    up.on("response", (answer) => {
      if (what === "answer") {
        // Read the whole answer (the service is done with it), then cut.
        answer.resume();
        answer.on("end", () => {
          proxy.lost.push({ what, ...request, status: answer.statusCode });
          req.socket.destroy();
        });
        return;
      }
      proxy.seen.push({ method: req.method, path: req.url, status: answer.statusCode });
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
      answer.on("error", () => req.socket.destroy());
    });
    up.on("error", () => req.socket.destroy());
    // A client that leaves (a watch closed, a page reloaded) closes its upstream request too.
    res.on("close", () => up.destroy());
    up.end(body);
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  proxy.url = `http://127.0.0.1:${server.address().port}`;
  return proxy;
}
