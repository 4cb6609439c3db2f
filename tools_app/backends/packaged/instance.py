"""One running packaged server: its stdio process, and the relay that lets many Streamable HTTP
clients (every ASGI process's session, a refresh, the runner itself) share it.

The process speaks MCP over stdio: one JSON-RPC message per line. The instance initializes
it once (declaring elicitation and sampling, which Toolbay relays to its own clients) and
answers the clients' ``initialize`` from that handshake. Then it relays:

- a client's request: sent on with an id of the instance's own (ids of different clients
  would collide), its ``progressToken`` likewise; the answer goes back to that client with
  its id, and so does every progress notification that names the token;
- a server's request (elicitation, sampling) and its log messages: stdio carries no
  related-request id, so the relay goes by who is calling (see ``_asker``): with one call in
  flight, or calls of one caller only (every call names its principal in ``_meta``, which is
  removed before the server sees it; a per-user instance has one caller by construction),
  they go to that caller's newest call; with calls of several callers in flight a request
  is refused with an error saying why (asking the wrong person is worse) and a log message
  goes to the standing GET streams only. Progress needs none of this: its token names the
  call. A question whose call ends before it is answered is answered with an error, so the
  server does not wait for ever;
- ``notifications/cancelled`` from a client, and a client that goes away before its answer,
  become ``notifications/cancelled`` to the server (once); an answer that still comes for
  such a call is counted (``late_answers``: a server that ignores cancellations);
- list changes and resource updates go to the standing GET streams and to ``on_notice``.

When the process exits every call in flight ends at once with a JSON-RPC error that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tools_app.backends.upstream.client import CALLER_META, INSTANCE_ENDED

log = logging.getLogger(__name__)

PROTOCOL_VERSION = "2025-11-25"
CLIENT_INFO = {"name": "toolbay-runner", "title": "Toolbay", "version": "1.0"}
CLIENT_CAPABILITIES: dict[str, Any] = {"elicitation": {}, "sampling": {}}
# Largest message a server may write on one line; a longer one ends the instance (a server
# that floods its output must not exhaust the runner's memory).
MAX_LINE_BYTES = 8 * 1024 * 1024
STDERR_LINES = 40
EXITED = -32603
BROADCAST = {
    "notifications/tools/list_changed",
    "notifications/resources/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/updated",
}


class InstanceFailed(Exception):
    """The process could not be started or initialized; the message is for operators."""


@dataclass
class _Call:
    """A client's request in flight on the server."""

    session: str
    client_id: Any
    method: str
    principal: str = ""  # who calls (CALLER_META), "" when not said
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)
    progress_token: Any = None
    done: bool = False
    cancelled: bool = False  # the server was told to stop it
    started: float = field(default_factory=time.monotonic)


Notice = Callable[["Instance", dict[str, Any]], Awaitable[None]]


class Instance:
    def __init__(
        self, process: asyncio.subprocess.Process, *, on_notice: Notice | None = None, single_caller: bool = False
    ) -> None:
        """``single_caller``: every call comes from one user (a per-user instance)."""
        self.process = process
        self.single_caller = single_caller
        self.uid = secrets.token_urlsafe(12)
        self.token = secrets.token_urlsafe(24)
        self.started_at = time.time()
        self.last_used = time.monotonic()
        self.init_result: dict[str, Any] = {}
        self.exit_reason = ""
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_LINES)
        self.calls_total = 0
        self.cancelled_total = 0  # notifications/cancelled sent to the server
        self.late_answers = 0  # answers to calls the server had been told to stop
        self.refused_requests = 0  # server requests refused because nobody could be asked
        self._on_notice = on_notice
        self._ids = itertools.count(1)
        self._server_ids = itertools.count(1)
        self._calls: dict[int, _Call] = {}
        self._server_requests: dict[str, tuple[Any, _Call]] = {}
        self._listeners: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self._write_lock = asyncio.Lock()
        self._handshake: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.exited = asyncio.Event()
        self._tasks = [asyncio.ensure_future(self._read_stdout())]
        if process.stderr is not None:
            self._tasks.append(asyncio.ensure_future(self._read_stderr()))

    # --- life -------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def in_flight(self) -> int:
        return len(self._calls)

    async def initialize(self, timeout: float) -> None:
        """The MCP handshake with the process; raises InstanceFailed."""
        params = {"protocolVersion": PROTOCOL_VERSION, "capabilities": CLIENT_CAPABILITIES, "clientInfo": CLIENT_INFO}
        try:
            await self._write({"jsonrpc": "2.0", "id": "toolbay-init", "method": "initialize", "params": params})
            async with asyncio.timeout(timeout):
                answer = await asyncio.shield(self._handshake)
        except TimeoutError:
            raise InstanceFailed(
                f"the server did not answer initialize within {timeout:.0f} s{self._stderr()}"
            ) from None
        except (ConnectionError, InstanceFailed) as exc:
            raise InstanceFailed(f"the server exited during start-up{self._stderr()}") from exc
        if "error" in answer or not isinstance(answer.get("result"), dict):
            raise InstanceFailed(f"the server refused initialize: {answer.get('error')}")
        self.init_result = answer["result"]
        await self._write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _stderr(self) -> str:
        tail = "\n".join(self.stderr_tail)[-1500:]
        return f"; its output: {tail}" if tail else ""

    async def stop(self, grace: float = 2.0) -> None:
        """End the process (stdin closed, then TERM, then KILL) and every call in flight."""
        process = self.process
        if process.returncode is None:
            with contextlib.suppress(Exception):
                if process.stdin is not None:
                    process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), grace)
            except TimeoutError:
                self._signal(15)
                try:
                    await asyncio.wait_for(process.wait(), grace)
                except TimeoutError:
                    self._signal(9)
                    await process.wait()
        await self._exited("the instance was stopped")
        for task in self._tasks:
            task.cancel()

    def _signal(self, signum: int) -> None:
        # The whole process group: a server's own children (npx → node) go too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signum)

    async def _exited(self, reason: str) -> None:
        if self.exited.is_set():
            return
        self.exit_reason = reason
        self.exited.set()
        if not self._handshake.done():
            self._handshake.set_exception(InstanceFailed(reason))
            self._handshake.exception()  # retrieved: nobody may be waiting
        for call_id, call in list(self._calls.items()):
            call.queue.put_nowait(_ended(call.client_id, reason))
            call.done = True
            del self._calls[call_id]
        for queue in self._listeners:
            queue.put_nowait(None)

    # --- reading the process ---------------------------------------------------------------

    async def _read_stdout(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        buffer = b""
        reason = "it exited"
        try:
            while True:
                chunk = await stdout.read(65536)
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        await self._incoming(line)
                if len(buffer) > MAX_LINE_BYTES:
                    reason = f"it wrote a message larger than {MAX_LINE_BYTES} bytes"
                    self._signal(9)
                    break
        except Exception:
            log.exception("instance %s: reading its output failed", self.uid)
            reason = "its output could not be read"
        code = await self.process.wait()
        if code is not None and code < 0:
            reason = f"it was killed by signal {-code}"
        elif code:
            reason = f"it exited with status {code}"
        await self._exited(reason + self._stderr())

    async def _read_stderr(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None
        with contextlib.suppress(Exception):
            while True:
                line = await stderr.readline()
                if not line:
                    return
                self.stderr_tail.append(line.decode("utf-8", "replace").rstrip()[:500])

    async def _incoming(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self.stderr_tail.append(f"(not JSON on stdout) {line[:200].decode('utf-8', 'replace')}")
            return
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if method is None:
            self._answer(message)
        elif "id" in message:
            await self._server_request(str(method), message)
        else:
            await self._notification(str(method), message)

    def _answer(self, message: dict[str, Any]) -> None:
        if message.get("id") == "toolbay-init":
            if not self._handshake.done():
                self._handshake.set_result(message)
            return
        call = self._calls.pop(message.get("id"), None)  # type: ignore[arg-type]
        if call is None:
            # The answer to a call its client abandoned: the server had been told to stop it.
            self.late_answers += 1
            return
        call.done = True
        call.queue.put_nowait({**message, "id": call.client_id})

    async def _server_request(self, method: str, message: dict[str, Any]) -> None:
        if method == "ping":
            await self._write({"jsonrpc": "2.0", "id": message["id"], "result": {}})
            return
        asker, problem = self._asker()
        if asker is None:
            self.refused_requests += 1
            log.info("instance %s: %s refused: %s", self.uid, method, problem)
            with contextlib.suppress(ConnectionError, OSError):
                await self._write(
                    {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32603, "message": f"Toolbay: {problem}"}}
                )
            return
        relay_id = f"toolbay-s{next(self._server_ids)}"
        self._server_requests[relay_id] = (message["id"], asker)
        asker.queue.put_nowait({**message, "id": relay_id})

    def _asker(self) -> tuple[_Call | None, str]:
        """The call a server request or log message belongs to, or why none can be chosen.

        stdio carries no related-request id, so this goes by who is calling: the tool calls in
        flight (else any request, e.g. a prompt or resource read), and when they all come from
        one caller (or there is one), that caller's newest call: the question reaches the
        right person, on the stream of the call most likely to be asking (a tool that asks
        does so soon after it starts). Calls of several callers in flight: no choice is safe.
        """
        live = [call for call in self._calls.values() if not call.cancelled]
        calls = [call for call in live if call.method == "tools/call"] or live
        if not calls:
            return None, "no call is in flight to ask"
        principals = {call.principal for call in calls}
        if len(calls) == 1 or self.single_caller or (len(principals) == 1 and "" not in principals):
            return max(calls, key=lambda call: call.started), ""
        return None, (
            f"{len(calls)} calls of different callers are in flight on this stdio server, and stdio does "
            "not say which call asks; retry when the others have ended"
        )

    async def _notification(self, method: str, message: dict[str, Any]) -> None:
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        assert isinstance(params, dict)
        if method == "notifications/progress":
            token = params.get("progressToken")
            call = self._calls.get(_call_of_token(token))  # type: ignore[arg-type]
            if call is not None and call.progress_token is not None:
                call.queue.put_nowait({**message, "params": {**params, "progressToken": call.progress_token}})
            return
        if method == "notifications/message":
            asker, _ = self._asker()
            if asker is not None:
                asker.queue.put_nowait(message)
            else:  # never to a call of someone else
                self._broadcast(message)
            return
        if method in BROADCAST:
            self._broadcast(message)
            if self._on_notice is not None:
                try:
                    await self._on_notice(self, message)
                except Exception:
                    log.exception("instance %s: handling %s failed", self.uid, method)

    def _broadcast(self, message: dict[str, Any]) -> None:
        for queue in self._listeners:
            if queue.qsize() < 1000:
                queue.put_nowait(message)

    # --- writing to the process -------------------------------------------------------------

    async def _write(self, message: dict[str, Any]) -> None:
        stdin = self.process.stdin
        if stdin is None or self.exited.is_set():
            raise ConnectionError("the server has exited")
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        async with self._write_lock:
            stdin.write(data)
            await stdin.drain()

    # --- what clients send -------------------------------------------------------------------

    def initialize_result(self, requested: Any) -> dict[str, Any]:
        return self.init_result

    async def call(self, session: str, message: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Relay a client's request; yields what goes back on its stream, the answer last."""
        self.last_used = time.monotonic()
        self.calls_total += 1
        relay_id = next(self._ids)
        call = _Call(session=session, client_id=message.get("id"), method=str(message.get("method")))
        params = message.get("params")
        outgoing = {**message, "id": relay_id}
        if isinstance(params, dict) and isinstance(params.get("_meta"), dict):
            meta = dict(params["_meta"])
            call.principal = str(meta.pop(CALLER_META, "") or "")
            if "progressToken" in meta:
                call.progress_token = meta["progressToken"]
                meta["progressToken"] = f"toolbay-p{relay_id}"
            outgoing["params"] = {k: v for k, v in params.items() if k != "_meta"}
            if meta:
                outgoing["params"]["_meta"] = meta
        if self.exited.is_set():
            yield _ended(call.client_id, self.exit_reason)
            return
        self._calls[relay_id] = call
        try:
            await self._write(outgoing)
            while True:
                item = await call.queue.get()
                if item is None:
                    return
                yield item
                if "method" not in item:
                    return
        except (ConnectionError, OSError):
            yield _ended(call.client_id, self.exit_reason or "it could not be written to")
        finally:
            self.last_used = time.monotonic()
            for relay, (server_id, asking) in list(self._server_requests.items()):
                if asking is call:  # a question the ended call can no longer answer: the server must not wait
                    del self._server_requests[relay]
                    with contextlib.suppress(ConnectionError, OSError):
                        await self._write(
                            {
                                "jsonrpc": "2.0",
                                "id": server_id,
                                "error": {"code": -32603, "message": "Toolbay: the call that asked has ended"},
                            }
                        )
            if not call.done:
                # The client went away (cancelled, timed out): the server stops too.
                self._calls.pop(relay_id, None)
                if not call.cancelled:
                    with contextlib.suppress(ConnectionError, OSError):
                        await self._cancel(relay_id, call, "The client went away.")

    async def answer(self, message: dict[str, Any]) -> None:
        """A client's answer to a server request relayed to it."""
        pending = self._server_requests.pop(str(message.get("id")), None)
        if pending is None:
            return
        original_id, _ = pending
        with contextlib.suppress(ConnectionError):
            await self._write({**message, "id": original_id})

    async def notify(self, session: str, message: dict[str, Any]) -> None:
        """A client's notification: cancellations are translated, the handshake's swallowed."""
        method = message.get("method")
        if method == "notifications/initialized":
            return
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        assert isinstance(params, dict)
        if method == "notifications/cancelled":
            for relay_id, call in list(self._calls.items()):
                if call.session == session and call.client_id == params.get("requestId") and not call.cancelled:
                    with contextlib.suppress(ConnectionError, OSError):
                        await self._cancel(relay_id, call, params.get("reason"))
                    return
            return
        with contextlib.suppress(ConnectionError):
            await self._write(message)

    async def _cancel(self, relay_id: int, call: _Call, reason: Any) -> None:
        call.cancelled = True
        self.cancelled_total += 1
        params: dict[str, Any] = {"requestId": relay_id}
        if isinstance(reason, str) and reason:
            params["reason"] = reason
        await self._write({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})

    async def listen(self) -> AsyncIterator[dict[str, Any]]:
        """The standing stream: broadcast notifications until the instance ends."""
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._listeners.add(queue)
        try:
            while not self.exited.is_set():
                item = await queue.get()
                if item is None:
                    return
                yield item
        finally:
            self._listeners.discard(queue)

    # --- for operators ------------------------------------------------------------------------

    def memory_bytes(self) -> int:
        """Resident memory of the process and its descendants (Linux /proc; 0 elsewhere)."""
        return process_tree_rss(self.process.pid)


def _ended(client_id: Any, reason: str) -> dict[str, Any]:
    """The error a call gets when the instance ended under it (``data`` says so, for retries)."""
    message = f"the packaged server ended during the call: {reason}"
    return {"jsonrpc": "2.0", "id": client_id, "error": {"code": EXITED, "message": message, "data": INSTANCE_ENDED}}


def _call_of_token(token: Any) -> int | None:
    if isinstance(token, str) and token.startswith("toolbay-p"):
        with contextlib.suppress(ValueError):
            return int(token[len("toolbay-p") :])
    return None


def process_tree_rss(root: int) -> int:
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/statm") as fh:
                resident = int(fh.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = resident * page
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total
