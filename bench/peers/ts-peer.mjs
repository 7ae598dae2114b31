// Peer client on the official TypeScript SDK: open N sessions, ping each
// once per interval (spread evenly), with a timeout; print one JSON line.
//   node ts-peer.mjs http URL_BASE N INTERVAL_S DURATION_S
//   node ts-peer.mjs stdio COMMAND N INTERVAL_S DURATION_S
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const sdk = (p) => require.resolve(`@modelcontextprotocol/sdk/${p}`, { paths: [process.env.MCPMON_NODE_MODULES] });
const { Client } = await import(sdk("client/index.js"));
const { StreamableHTTPClientTransport } = await import(sdk("client/streamableHttp.js"));
const { StdioClientTransport } = await import(sdk("client/stdio.js"));

const [mode, target, nArg, intervalArg, durationArg] = process.argv.slice(2);
const n = Number(nArg), interval = Number(intervalArg) * 1000, duration = Number(durationArg) * 1000;
const clients = [];
for (let i = 0; i < n; i++) {
  const client = new Client({ name: "ts-peer", version: "1" });
  const transport = mode === "http"
    // A target ending in /mcp is one server every session shares.
    ? new StreamableHTTPClientTransport(new URL(target.endsWith("/mcp") ? target : `${target}/mcp/${i}`))
    : new StdioClientTransport({ command: target, args: ["--stdio"] });
  await client.connect(transport);
  clients.push(client);
}
// Its sessions are open: a caller measuring from outside starts here.
console.log("pinging");
const rtts = [];
let pings = 0, failures = 0;
const cpu0 = process.cpuUsage();
const start = performance.now();
await Promise.all(clients.map(async (client, i) => {
  await new Promise((r) => setTimeout(r, (interval * i) / n));
  while (performance.now() - start < duration) {
    const t0 = performance.now();
    try {
      await client.ping({ timeout: 5000 });
      rtts.push((performance.now() - t0) * 1000);
      pings++;
    } catch { failures++; }
    const next = interval - (performance.now() - t0);
    if (next > 0) await new Promise((r) => setTimeout(r, next));
  }
}));
const cpu = process.cpuUsage(cpu0);
const hwm = Number(/VmHWM:\s+(\d+)/.exec(readFileSync("/proc/self/status", "utf8"))[1]);
rtts.sort((a, b) => a - b);
const q = (p) => rtts.length ? rtts[Math.min(rtts.length - 1, Math.floor(p * rtts.length))] : null;
console.log(JSON.stringify({ client: "ts", cpu_s: (cpu.user + cpu.system) / 1e6, peak_rss_kib: hwm, pings, failures, p50_us: q(0.5), p99_us: q(0.99) }));
await Promise.all(clients.map((c) => c.close().catch(() => {})));
process.exit(0);
