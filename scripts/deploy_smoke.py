"""Smoke test of a running deployment with two web servers (make deploy-docker): a session
started on one continues on the other, a tools/call answered as an SSE stream arrives event
by event, and a background call runs on a worker (the official MCP SDK as client).

    python scripts/deploy_smoke.py --key KEY --web http://10.0.0.2:8000 --web http://10.0.0.3:8000

Requests carry ``Host: localhost`` (in the compose file's ALLOWED_HOSTS) whatever address they
go to. Exits non-zero with the reason on the first failure.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import httpx
import httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

PROTOCOL = "2025-11-25"


def session_moves(webs: list[str], key: str) -> None:
    headers = {
        "Host": "localhost",
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    with httpx.Client(headers=headers, timeout=30) as http:
        init = http.post(
            f"{webs[0]}/mcp/demo",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "smoke", "version": "1"},
                },
            },
        )
        init.raise_for_status()
        session = {"Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": PROTOCOL}
        http.post(
            f"{webs[1]}/mcp/demo", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
        )
        for i, web in enumerate(webs * 2):
            call = {
                "jsonrpc": "2.0",
                "id": 10 + i,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": f"hop {i}"}},
            }
            answer = http.post(f"{web}/mcp/demo", json=call, headers=session)
            answer.raise_for_status()
            assert f"hop {i}" in answer.text, answer.text
        print(f"session {session['Mcp-Session-Id'][:8]}… served by {len(webs)} web containers in turn")

        call = {
            "jsonrpc": "2.0",
            "id": 99,
            "method": "tools/call",
            "params": {"name": "countdown", "arguments": {"n": 5}, "_meta": {"progressToken": "p"}},
        }
        arrivals: list[tuple[float, str]] = []
        with http.stream("POST", f"{webs[1]}/mcp/demo", json=call, headers=session) as response:
            assert response.headers["content-type"].startswith("text/event-stream"), response.headers
            started = time.monotonic()
            for line in response.iter_lines():
                if "notifications/progress" in line:
                    arrivals.append((time.monotonic() - started, "progress"))
                elif line.startswith("data:") and '"result"' in line:
                    arrivals.append((time.monotonic() - started, "result"))
        progress = [t for t, kind in arrivals if kind == "progress"]
        result = [t for t, kind in arrivals if kind == "result"]
        assert len(progress) == 5 and len(result) == 1 and result[0] - progress[0] > 0.5, arrivals
        print(f"SSE: 5 progress events over {progress[-1] - progress[0]:.2f} s, then the result")


async def background_call(web: str, key: str) -> None:
    http = httpx2.AsyncClient(headers={"Host": "localhost", "Authorization": f"Bearer {key}"}, timeout=60)
    async with Client(streamable_http_client(f"{web}/mcp/demo", http_client=http)) as client:
        started = time.monotonic()
        result = await client.call_tool("slow_count", {"count": 5})
        text = result.content[0].text  # type: ignore[union-attr]
        assert not result.is_error and text == "Counted to 5.", text
        print(f"background call on a worker: {text!r} in {time.monotonic() - started:.1f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--key", required=True, help="an API key of the demo tenant")
    parser.add_argument("--web", action="append", required=True, help="base URL of a web server (give two)")
    args = parser.parse_args()
    if len(args.web) < 2:
        parser.error("give at least two --web")
    try:
        session_moves(args.web, args.key)
        asyncio.run(background_call(args.web[0], args.key))
    except Exception as exc:
        print(f"smoke test failed: {exc!r}", file=sys.stderr)
        return 1
    print("smoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
