// An MCP server built with the official TypeScript SDK, for mcpmon's tests
// of the health_check shapes real servers answer with. Over stdio.
//
//   HEALTH_SHAPE=json  health_check answers {"status": …} as JSON text (default)
//   HEALTH_SHAPE=word  health_check answers the bare status word
//   HEALTH_STATUS=…    the status it reports (default healthy)
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";

const shape = process.env.HEALTH_SHAPE ?? "json";
const status = process.env.HEALTH_STATUS ?? "healthy";

const server = new McpServer({ name: "ts-sdk-health", version: "1.0.0" });
server.registerTool(
  "health_check",
  { description: "Report this server's health." },
  async () => {
    const text =
      shape === "word"
        ? status
        : JSON.stringify({ status, uptime_seconds: Math.floor(process.uptime()) });
    return { content: [{ type: "text", text }] };
  },
);
await server.connect(new StdioServerTransport());
