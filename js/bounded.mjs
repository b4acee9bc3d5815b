// Reads at most `limit` bytes of a response body and cancels the rest: the
// one bounded body reader of the shim (MCP responses) and of the Computer
// transport. Callers ask for one byte more than they accept, to tell an
// oversized body from a full one. `onChunk` sees each chunk as it arrives;
// its answering `true` ends the read there (an MCP event stream that
// carried its response, which a server may hold open).
export async function readBounded(response, limit, onChunk) {
  if (response.body === null) return new Uint8Array(0);
  const reader = response.body.getReader();
  const chunks = [];
  let size = 0;
  while (size < limit) {
    const { done, value } = await reader.read();
    if (done) break;
    const enough = onChunk?.(value) === true;
    chunks.push(value);
    size += value.byteLength;
    if (enough) break;
  }
  await reader.cancel().catch(() => {});
  const out = new Uint8Array(Math.min(size, limit));
  let at = 0;
  for (const chunk of chunks) {
    const take = Math.min(chunk.byteLength, out.byteLength - at);
    out.set(chunk.subarray(0, take), at);
    at += take;
    if (at === out.byteLength) break;
  }
  return out;
}
