// The settled frames of an open watch (`GET /sessions/:id/watch`, SSE), for
// the benchmarks that time a turn as a watching client sees it.

/** `settled(commandId)` resolves with the settlement once its frame arrived. */
export function settledFrames(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const seen = new Map();
  const waiting = new Map();
  let buffer = "";
  (async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = event.split("\n").find((l) => l.startsWith("data: "));
        if (!event.startsWith("event: frame") || !data) continue;
        const frame = JSON.parse(data.slice(6));
        if (frame.type !== "settled") continue;
        const id = frame.settlement.commandId;
        seen.set(id, frame.settlement);
        waiting.get(id)?.(frame.settlement);
      }
    }
  })().catch(() => {});
  return {
    settled: (id) => (seen.has(id) ? Promise.resolve(seen.get(id)) : new Promise((resolve) => waiting.set(id, resolve))),
    close: () => reader.cancel().catch(() => {}),
  };
}
