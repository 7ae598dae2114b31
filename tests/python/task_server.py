"""A 2026-07-28 server with the tasks extension (`io.modelcontextprotocol/tasks`,
SEP-2663), built on the official Python SDK's extension interface (mcp 2.x),
for mcpmon's tests. Over Streamable HTTP:

    python task_server.py PORT LOG

The `research` tool, called by a client that opts in (the extension in its
request's `clientCapabilities`), answers `resultType: "task"`. The task works
for WORK_SECONDS (default 3), its `lastUpdatedAt` moving at every 0.5 s step,
then completes with its result in `tasks/get`. STUCK_AFTER=S stops it moving
after S seconds, with a `ttlMs` of 2 s, so it never completes.

Every request about a task appends a JSON line to LOG: the method, the task
id and the `Mcp-Name` header it came with; each task created appends one line
with `"method": "create"`.
"""

import json
import os
import sys
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp_types import RequestParams

EXTENSION = "io.modelcontextprotocol/tasks"
WORK = float(os.environ.get("WORK_SECONDS", "3"))
STUCK = os.environ.get("STUCK_AFTER")
STEP = 0.5
TASKS: dict[str, float] = {}
LOG = sys.argv[2]


class TaskParams(RequestParams):
    taskId: str


def log(method: str, task_id: str, ctx: Any) -> None:
    headers = getattr(ctx.request, "headers", None) or {}
    with open(LOG, "a") as f:
        f.write(json.dumps({"method": method, "task": task_id, "mcp_name": headers.get("mcp-name")}) + "\n")


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


def state(task_id: str) -> dict[str, Any]:
    created = TASKS[task_id]
    age = time.time() - created
    moving = age if STUCK is None else min(age, float(STUCK))
    updated = created + STEP * int(moving / STEP)
    task = {
        "resultType": "complete",
        "taskId": task_id,
        "status": "working",
        "statusMessage": f"step {int(moving / STEP)}",
        "createdAt": stamp(created),
        "lastUpdatedAt": stamp(updated),
        "ttlMs": 2000 if STUCK is not None else 60000,
        "pollIntervalMs": 500,
    }
    if STUCK is None and age >= WORK:
        task["status"] = "completed"
        task["result"] = {"content": [{"type": "text", "text": json.dumps({"done": True})}]}
    return task


class Tasks(Extension):
    identifier = EXTENSION

    def methods(self):
        return [
            MethodBinding("tasks/get", TaskParams, self.get),
            MethodBinding("tasks/cancel", TaskParams, self.cancel),
        ]

    async def get(self, ctx, params: TaskParams):
        log("tasks/get", params.taskId, ctx)
        return state(params.taskId)

    async def cancel(self, ctx, params: TaskParams):
        log("tasks/cancel", params.taskId, ctx)
        TASKS.pop(params.taskId, None)
        return {}

    async def intercept_tool_call(self, params, ctx, call_next):
        caps = (ctx.meta or {}).get("io.modelcontextprotocol/clientCapabilities") or {}
        if params.name != "research" or EXTENSION not in (caps.get("extensions") or {}):
            return await call_next(ctx)
        task_id = uuid.uuid4().hex
        TASKS[task_id] = time.time()
        log("create", task_id, ctx)
        created = state(task_id)
        created["resultType"] = "task"
        return created


mcp = MCPServer("python-sdk-tasks", extensions=[Tasks()])


@mcp.tool()
def research(topic: str) -> str:
    """Research a topic (without the extension: at once)."""
    return json.dumps({"done": True, "topic": topic})


if __name__ == "__main__":
    mcp.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
