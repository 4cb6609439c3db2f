"""The runner (``manage.py run_packaged``): starts, relays to, watches and stops the instances
of packaged MCP servers.

Any number of runners may run (one per machine is usual). Each pops start requests from
Redis (``locator.WANTED_KEY``); the one that takes an instance's lease starts it: install
(once per version per machine), spawn in the sandbox, MCP handshake. It then serves the
instance as a Streamable HTTP endpoint on its own HTTP port (``/i/<uid>``, bearer token per
instance), so the upstream backend, federation and refresh reach it exactly as they reach
any upstream server, and publishes the instance's status for every process to read.

An instance is stopped after ``TOOLBAY_PACKAGED_IDLE_SECONDS`` without a call, when its
settings change, or by an operator; one that dies ends its calls in flight at once (with a
JSON-RPC error, an ``isError`` result for the model) and is started again by the next call
after a back-off (1 s, doubling to 60 s; reset after a minute of good health).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from mcp_platform.redis_clients import async_redis
from tools_app.backends.packaged import locator
from tools_app.backends.packaged.instance import Instance, InstanceFailed
from tools_app.backends.packaged.launch import Launch, LaunchRefused, fingerprints, launch_of, preinstall_enabled
from tools_app.backends.packaged.sandbox import LIMITS, SandboxSpec, sandbox_status, spawn
from tools_app.backends.upstream.client import UpstreamEndpoint, UpstreamSession
from tools_app.backends.upstream.federation import UpstreamRefreshError, upstream_refresh_async
from tools_app.backends.upstream.listener import pass_on_update, subscribe_mirrored

log = logging.getLogger(__name__)

RENEW_SECONDS = 10.0
STATUS_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 60.0
HEALTHY_SECONDS = 60.0
# A list change announced this soon after start is the server registering its tools, which the
# refresh at start already saw.
SETTLING_SECONDS = 2.0
MAX_BODY_BYTES = 8 * 1024 * 1024
KEEPALIVE_SECONDS = 15.0
# The whole environment of a server besides its own values (nothing of the runner's leaks in).
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}


@dataclass
class Slot:
    """One scope (server, tenant[, user]) this runner holds: its instance, if any, and history."""

    scope: str
    upstream_id: int
    tenant_id: int
    user: str | None
    lease_token: str = field(default_factory=lambda: secrets.token_hex(8))
    state: str = "starting"
    instance: Instance | None = None
    launch: Launch | None = None
    restarts: int = 0
    crashes: int = 0
    last_error: str = ""
    retry_at: float = 0.0
    started_at: float = 0.0
    cold_start_seconds: float = 0.0
    task: asyncio.Task[None] | None = None


class Runner:
    def __init__(self, *, host: str, port: int, advertise: str = "") -> None:
        self.id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.host, self.port, self.advertise = host, port, advertise
        self.slots: dict[str, Slot] = {}
        self.by_uid: dict[str, Slot] = {}
        self._refreshed: dict[int, str] = {}  # upstream id -> fingerprint refreshed at start
        self._refresh_tasks: dict[int, asyncio.Task[None]] = {}
        self._subscribe_tasks: set[asyncio.Future[None]] = set()
        self.base_url = ""
        self.stopping = asyncio.Event()

    # --- the loops ----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        import uvicorn

        status = sandbox_status()
        if status.available:
            log.info("runner %s: sandbox %s; limits: %s", self.id, status.mechanism, LIMITS)
        elif settings.TOOLBAY_SANDBOX_OPTOUT:
            log.warning(
                "runner %s: NO SANDBOX (%s); untrusted packages run unconfined (TOOLBAY_SANDBOX_OPTOUT)",
                self.id,
                status.reason,
            )
        else:
            log.warning("runner %s: no sandbox (%s); untrusted packages are refused", self.id, status.reason)
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        port = sock.getsockname()[1]
        host = self.advertise or self.host
        if host in ("0.0.0.0", "::"):
            # Bound to every interface: other processes reach this one at the address its host name
            # resolves to (a pod's IP in Kubernetes, a container's in compose).
            host = socket.gethostbyname(socket.gethostname())
        self.base_url = f"http://{host}:{port}"
        config = uvicorn.Config(
            self.app,
            interface="asgi3",
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        server = uvicorn.Server(config)
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        loops = [asyncio.ensure_future(loop()) for loop in (self._take_requests, self._upkeep)]
        preinstall = asyncio.ensure_future(sync_to_async(preinstall_enabled, thread_sensitive=False)())
        log.info("runner %s serves instances at %s", self.id, self.base_url)
        try:
            await self._heartbeat()
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=RENEW_SECONDS)
                await self._heartbeat()
                for task in [*loops, serving]:
                    if task.done():
                        task.result()  # a loop that ended raises what ended it
        finally:
            self.stopping.set()
            for task in [*loops, preinstall]:
                task.cancel()
            await asyncio.gather(*(self._release(slot) for slot in list(self.slots.values())), return_exceptions=True)
            server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(serving, 5)
            with contextlib.suppress(Exception):
                await async_redis().delete(locator.runner_key(self.id))
                await async_redis().zrem(locator.RUNNERS_KEY, self.id)

    async def _heartbeat(self) -> None:
        status = sandbox_status()
        data = {
            "id": self.id,
            "url": self.base_url,
            "sandbox": status.mechanism if status.available else "",
            "sandbox_reason": status.reason,
            "limits": LIMITS,
            "optout": settings.TOOLBAY_SANDBOX_OPTOUT,
            "instances": sum(1 for s in self.slots.values() if s.instance is not None),
            "at": time.time(),
        }
        with contextlib.suppress(Exception):
            redis = async_redis()
            await redis.set(locator.runner_key(self.id), json.dumps(data), ex=locator.RUNNER_ALIVE_SECONDS)
            await redis.zadd(locator.RUNNERS_KEY, {self.id: time.time()})
            await redis.zremrangebyscore(locator.RUNNERS_KEY, "-inf", time.time() - 3600)

    async def _take_requests(self) -> None:
        redis = async_redis()
        control = locator.control_key(self.id)
        while not self.stopping.is_set():
            try:
                popped = await redis.blpop([control, locator.WANTED_KEY], timeout=1)
            except Exception as exc:
                log.warning("runner %s: Redis: %s", self.id, exc)
                await asyncio.sleep(1)
                continue
            if popped is None:
                continue
            key, raw = popped
            try:
                request = json.loads(raw)
                if (key.decode() if isinstance(key, bytes) else key) == control:
                    await self._control(request)
                else:
                    await self._wanted(int(request["upstream"]), int(request["tenant"]), request.get("user") or None)
            except Exception:
                log.exception("runner %s: cannot handle %r", self.id, raw)

    async def _wanted(self, upstream_id: int, tenant_id: int, user: str | None) -> None:
        scope = locator.scope_of(upstream_id, tenant_id, user)
        slot = self.slots.get(scope)
        if slot is not None:
            if slot.state in ("crashed", "failed") and time.time() >= slot.retry_at:
                self._start(slot)
            else:
                await self._publish(slot)
            return
        running = sum(1 for s in self.slots.values() if s.instance is not None)
        if running >= settings.TOOLBAY_PACKAGED_MAX_INSTANCES:
            log.warning("runner %s is full (%d instances); leaving %s to another runner", self.id, running, scope)
            return
        slot = Slot(scope=scope, upstream_id=upstream_id, tenant_id=tenant_id, user=user)
        if not await async_redis().set(
            locator.lease_key(scope), slot.lease_token, nx=True, ex=locator.STATUS_TTL_SECONDS
        ):
            return  # another runner holds it
        self.slots[scope] = slot
        self._start(slot)

    def _start(self, slot: Slot) -> None:
        if slot.task is not None and not slot.task.done():
            return
        slot.state = "starting"
        slot.task = asyncio.ensure_future(self._run_slot(slot))

    async def _run_slot(self, slot: Slot) -> None:
        """Start the instance and watch it until it ends."""
        began = time.monotonic()
        await self._publish(slot)
        try:
            launch = await sync_to_async(launch_of, thread_sensitive=False)(slot.upstream_id)
        except LaunchRefused as exc:
            await self._failed(slot, str(exc), final=True)
            return
        except Exception as exc:
            log.exception("runner: cannot prepare %s", slot.scope)
            await self._failed(slot, f"cannot prepare the server: {exc}", final=False)
            return
        slot.launch = launch
        spec = SandboxSpec(
            package_dir=launch.package_dir,
            argv=launch.argv,
            env={**BASE_ENV, **launch.env},
            allow_hosts=launch.allow_hosts,
            ro_paths=launch.ro_paths,
            node_proxy=launch.node_proxy,
            memory_bytes=settings.TOOLBAY_PACKAGED_MEMORY_BYTES,
            cpu_seconds=settings.TOOLBAY_PACKAGED_CPU_SECONDS,
            max_processes=settings.TOOLBAY_PACKAGED_MAX_PROCESSES,
            max_open_files=settings.TOOLBAY_PACKAGED_OPEN_FILES,
        )
        try:
            process = await spawn(spec, trusted=launch.trusted)
        except Exception as exc:
            await self._failed(slot, f"refused to start: {exc}", final=True)
            return
        instance = Instance(process, on_notice=self._noticed, single_caller=slot.user is not None)
        slot.instance = instance
        self.by_uid[instance.uid] = slot
        try:
            await instance.initialize(timeout=settings.TOOLBAY_PACKAGED_START_SECONDS)
        except InstanceFailed as exc:
            await instance.stop(grace=0.5)
            self._forget_instance(slot)
            await self._failed(slot, str(exc), final=False)
            return
        slot.state = "running"
        slot.started_at = time.time()
        slot.cold_start_seconds = time.monotonic() - began
        await self._publish(slot)
        log.info("runner: %s started (pid %s, %.2f s)", slot.scope, instance.pid, slot.cold_start_seconds)
        if self._refreshed.get(slot.upstream_id) != launch.fingerprint:
            self._refreshed[slot.upstream_id] = launch.fingerprint
            self._schedule_refresh(slot, delay=0.0)
        else:  # imported already: this instance only subscribes to the mirrored resources
            self._subscribe_tasks.add(task := asyncio.ensure_future(self._refresh(slot, 0.0, reimport=False)))
            task.add_done_callback(self._subscribe_tasks.discard)
        await instance.exited.wait()
        self._forget_instance(slot)
        if slot.state == "running":  # not stopped on purpose
            ran = time.time() - slot.started_at
            if ran > HEALTHY_SECONDS:
                slot.crashes = 0
            await self._failed(slot, instance.exit_reason, final=False)

    def _forget_instance(self, slot: Slot) -> None:
        if slot.instance is not None:
            self.by_uid.pop(slot.instance.uid, None)
        slot.instance = None

    async def _failed(self, slot: Slot, reason: str, *, final: bool) -> None:
        slot.crashes += 1
        slot.restarts += 1
        slot.last_error = reason
        slot.state = "failed" if final else "crashed"
        backoff = MAX_BACKOFF_SECONDS if final else min(2 ** (slot.crashes - 1), MAX_BACKOFF_SECONDS)
        slot.retry_at = time.time() + backoff
        log.warning("runner: %s %s: %s (retry after %.0f s)", slot.scope, slot.state, reason, backoff)
        await self._publish(slot)

    async def _release(self, slot: Slot) -> None:
        """Stop the slot's instance and give the scope up (the next call starts a fresh one)."""
        self.slots.pop(slot.scope, None)
        slot.state = "stopped"
        if slot.task is not None and not slot.task.done() and slot.instance is None:
            slot.task.cancel()
        if slot.instance is not None:
            instance = slot.instance
            self._forget_instance(slot)
            await instance.stop()
        redis = async_redis()
        with contextlib.suppress(Exception):
            await redis.delete(locator.status_key(slot.scope))
            if await redis.get(locator.lease_key(slot.scope)) == slot.lease_token.encode():
                await redis.delete(locator.lease_key(slot.scope))

    async def _upkeep(self) -> None:
        """Renew leases and statuses, stop idle instances and those whose settings changed."""
        last_renew = 0.0
        while not self.stopping.is_set():
            await asyncio.sleep(1.0)
            now = time.monotonic()
            idle = settings.TOOLBAY_PACKAGED_IDLE_SECONDS
            done: list[Slot] = []
            for slot in list(self.slots.values()):
                instance = slot.instance
                if instance is not None and slot.state == "running":
                    if instance.in_flight == 0 and now - instance.last_used > idle:
                        log.info("runner: %s idle for %.0f s; stopping it", slot.scope, now - instance.last_used)
                        done.append(slot)
                elif slot.state in ("crashed", "failed") and time.time() > slot.retry_at + idle:
                    done.append(slot)  # nobody asked for it again
            # Stopped together: each may take its grace period to exit.
            await asyncio.gather(*(self._release(slot) for slot in done), return_exceptions=True)
            if now - last_renew >= STATUS_SECONDS:
                last_renew = now
                await self._renew_all()

    async def _renew_all(self) -> None:
        slots = list(self.slots.values())
        if not slots:
            return
        try:
            current = await sync_to_async(fingerprints, thread_sensitive=False)(
                sorted({slot.upstream_id for slot in slots})
            )
        except Exception:
            log.exception("runner: cannot read the servers' settings")
            current = None
        redis = async_redis()
        for slot in slots:
            if (
                current is not None
                and slot.launch is not None
                and current.get(slot.upstream_id) != slot.launch.fingerprint
            ):
                log.info("runner: %s changed its settings (or was removed); stopping its instance", slot.scope)
                self._refreshed.pop(slot.upstream_id, None)
                await self._release(slot)
                continue
            if await redis.get(locator.lease_key(slot.scope)) != slot.lease_token.encode():
                log.warning("runner: lost the lease of %s; stopping its instance", slot.scope)
                self.slots.pop(slot.scope, None)
                if slot.instance is not None:
                    await slot.instance.stop()
                continue
            await redis.expire(locator.lease_key(slot.scope), locator.STATUS_TTL_SECONDS)
            await self._publish(slot)

    async def _publish(self, slot: Slot) -> None:
        instance = slot.instance
        status: dict[str, Any] = {
            "scope": slot.scope,
            "upstream": slot.upstream_id,
            "tenant": slot.tenant_id,
            "user": slot.user,
            "name": slot.launch.name if slot.launch else "",
            "package": f"{slot.launch.package}@{slot.launch.version}" if slot.launch and slot.launch.package else "",
            "state": slot.state,
            "runner": self.id,
            "restarts": slot.restarts,
            "last_error": slot.last_error[-2000:],
            "retry_at": slot.retry_at,
            "cold_start_seconds": round(slot.cold_start_seconds, 3),
        }
        if instance is not None and slot.state == "running":
            status.update(
                url=f"{self.base_url}/i/{instance.uid}",
                token=instance.token,
                pid=instance.pid,
                started_at=slot.started_at,
                memory=instance.memory_bytes(),
                calls=instance.calls_total,
                in_flight=instance.in_flight,
                cancelled=instance.cancelled_total,
                late_answers=instance.late_answers,
                refused_requests=instance.refused_requests,
            )
        with contextlib.suppress(Exception):
            await async_redis().set(locator.status_key(slot.scope), json.dumps(status), ex=locator.STATUS_TTL_SECONDS)

    async def _control(self, request: dict[str, Any]) -> None:
        slot = self.slots.get(str(request.get("scope")))
        if slot is None:
            return
        action = request.get("action")
        if action == "stop":
            await self._release(slot)
        elif action == "restart":
            instance = slot.instance
            slot.state = "restarting"
            if instance is not None:
                self._forget_instance(slot)
                await instance.stop()
            slot.restarts += 1
            if slot.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await slot.task
            slot.crashes = 0
            self._start(slot)

    # --- list changes: re-import --------------------------------------------------------------

    async def _noticed(self, instance: Instance, message: dict[str, Any]) -> None:
        slot = self.by_uid.get(instance.uid)
        if slot is None:
            return
        if message.get("method") == "notifications/resources/updated":
            # To Toolbay's own subscribers of the mirrored resource, as the listener does for
            # HTTP upstreams (the runner subscribed to the mirrored URIs when it imported).
            params = message.get("params")
            await pass_on_update(slot.upstream_id, params.get("uri") if isinstance(params, dict) else None)
            return
        if time.time() - slot.started_at < SETTLING_SECONDS:
            return
        self._schedule_refresh(slot, delay=0.2)

    def _schedule_refresh(self, slot: Slot, *, delay: float) -> None:
        upstream_id = slot.upstream_id
        task = self._refresh_tasks.get(upstream_id)
        if task is not None and not task.done():
            return
        self._refresh_tasks[upstream_id] = asyncio.ensure_future(self._refresh(slot, delay))

    async def _refresh(self, slot: Slot, delay: float, *, reimport: bool = True) -> None:
        await asyncio.sleep(delay)
        instance = slot.instance
        if instance is None or slot.launch is None:
            return
        endpoint = UpstreamEndpoint(
            id=slot.upstream_id,
            name=slot.launch.name,
            url=f"{self.base_url}/i/{instance.uid}",
            headers=(("Authorization", f"Bearer {instance.token}"),),
            secret_values=(instance.token,),
            timeout_seconds=settings.TOOLBAY_UPSTREAM_TIMEOUT_SECONDS,
            scope=slot.scope,
            internal=True,
        )
        session = UpstreamSession(endpoint)
        try:
            if reimport:
                report = await upstream_refresh_async(upstream_id=slot.upstream_id, session=session)
                log.info("runner: %s re-imported: %s", slot.launch.name, report.summary())
            else:
                await session.initialize()
            # A stdio server has one session: a subscription made here lasts as long as the instance.
            await subscribe_mirrored(slot.upstream_id, session)
        except (UpstreamRefreshError, Exception) as exc:
            log.warning("runner: re-import of %s failed: %s", slot.launch.name, exc)
        finally:
            with contextlib.suppress(Exception):
                await session.close()

    # --- HTTP: every instance as a Streamable HTTP endpoint ---------------------------------------

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if path == "/metrics" and method == "GET":
            # As the web processes' /metrics: METRICS_TOKEN, or open only while DEBUG=1.
            token = settings.METRICS_TOKEN
            offered = dict(scope["headers"]).get(b"authorization", b"")
            if not token and not settings.DEBUG:
                await _plain(send, 403, b"/metrics is off: set METRICS_TOKEN\n")
            elif token and not secrets.compare_digest(offered, f"Bearer {token}".encode()):
                await _plain(send, 401, b"Authorization required\n")
            else:
                await _plain(send, 200, self.metrics_text().encode(), "text/plain; version=0.0.4")
            return
        if path == "/healthz":
            await _plain(send, 200, b"ok")
            return
        uid = path[len("/i/") :] if path.startswith("/i/") else ""
        slot = self.by_uid.get(uid)
        instance = slot.instance if slot is not None else None
        if instance is None or instance.exited.is_set():
            await _json(
                send, 404, {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "No such instance"}}
            )
            return
        headers = dict(scope["headers"])
        if not secrets.compare_digest(headers.get(b"authorization", b""), f"Bearer {instance.token}".encode()):
            await _json(send, 401, {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "Unauthorized"}})
            return
        session = headers.get(b"mcp-session-id", b"").decode()
        if method == "DELETE":
            await _plain(send, 200, b"")
        elif method == "GET":
            await _sse(send, receive, instance.listen(), keepalive=True)
        elif method == "POST":
            await self._post(instance, session, receive, send)
        else:
            await _plain(send, 405, b"")

    async def _post(self, instance: Instance, session: str, receive: Any, send: Any) -> None:
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if len(body) > MAX_BODY_BYTES:
                await _plain(send, 413, b"")
                return
            if not event.get("more_body"):
                break
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            await _json(send, 400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            return
        method = message.get("method")
        if method is None:
            await instance.answer(message)
            await _plain(send, 202, b"")
        elif "id" not in message:
            await instance.notify(session, message)
            await _plain(send, 202, b"")
        elif method == "initialize":
            answer = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "result": instance.initialize_result(message.get("params")),
            }
            await _json(send, 200, answer, session_id=secrets.token_urlsafe(16))
        elif method == "ping":
            await _json(send, 200, {"jsonrpc": "2.0", "id": message["id"], "result": {}})
        else:
            await _sse(send, receive, instance.call(session or "-", message), keepalive=False)

    # --- metrics ---------------------------------------------------------------------------------

    def metrics_text(self) -> str:
        lines = [
            "# HELP toolbay_packaged_instance_memory_bytes Resident memory of an instance's processes.",
            "# TYPE toolbay_packaged_instance_memory_bytes gauge",
            "# HELP toolbay_packaged_instance_uptime_seconds Seconds since the instance started.",
            "# TYPE toolbay_packaged_instance_uptime_seconds gauge",
            "# HELP toolbay_packaged_instance_restarts_total Restarts (crashes, operator restarts) of a scope.",
            "# TYPE toolbay_packaged_instance_restarts_total counter",
            "# HELP toolbay_packaged_instance_calls_total Requests relayed to the instance.",
            "# TYPE toolbay_packaged_instance_calls_total counter",
            "# HELP toolbay_packaged_instance_cold_start_seconds Last start (install, spawn, handshake).",
            "# TYPE toolbay_packaged_instance_cold_start_seconds gauge",
            "# HELP toolbay_packaged_instance_cancelled_total Calls the server was told to stop.",
            "# TYPE toolbay_packaged_instance_cancelled_total counter",
            "# HELP toolbay_packaged_instance_late_answers_total Answers to calls the server had been told to stop.",
            "# TYPE toolbay_packaged_instance_late_answers_total counter",
            "# HELP toolbay_packaged_instance_refused_requests_total Server requests refused (no single caller).",
            "# TYPE toolbay_packaged_instance_refused_requests_total counter",
            "# HELP toolbay_packaged_instance_in_flight Requests relayed to the instance and not yet answered.",
            "# TYPE toolbay_packaged_instance_in_flight gauge",
            "# HELP toolbay_packaged_instance_up 1 while the instance is running.",
            "# TYPE toolbay_packaged_instance_up gauge",
        ]
        now = time.time()
        for slot in self.slots.values():
            labels = f'scope="{slot.scope}",upstream="{slot.upstream_id}",tenant="{slot.tenant_id}"'
            instance = slot.instance
            running = instance is not None and slot.state == "running"
            lines.append(f"toolbay_packaged_instance_up{{{labels}}} {1 if running else 0}")
            lines.append(f"toolbay_packaged_instance_restarts_total{{{labels}}} {slot.restarts}")
            lines.append(f"toolbay_packaged_instance_cold_start_seconds{{{labels}}} {slot.cold_start_seconds:.3f}")
            if running and instance is not None:
                lines.append(f"toolbay_packaged_instance_memory_bytes{{{labels}}} {instance.memory_bytes()}")
                lines.append(f"toolbay_packaged_instance_uptime_seconds{{{labels}}} {now - slot.started_at:.1f}")
                lines.append(f"toolbay_packaged_instance_calls_total{{{labels}}} {instance.calls_total}")
                lines.append(f"toolbay_packaged_instance_in_flight{{{labels}}} {instance.in_flight}")
                lines.append(f"toolbay_packaged_instance_cancelled_total{{{labels}}} {instance.cancelled_total}")
                lines.append(f"toolbay_packaged_instance_late_answers_total{{{labels}}} {instance.late_answers}")
                lines.append(
                    f"toolbay_packaged_instance_refused_requests_total{{{labels}}} {instance.refused_requests}"
                )
        return "\n".join(lines) + "\n"


# --- tiny ASGI responses --------------------------------------------------------------------------


async def _plain(send: Any, status: int, body: bytes, content_type: str = "text/plain") -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type.encode())]})
    await send({"type": "http.response.body", "body": body})


async def _json(send: Any, status: int, value: Any, *, session_id: str | None = None) -> None:
    headers = [(b"content-type", b"application/json")]
    if session_id:
        headers.append((b"mcp-session-id", session_id.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(value).encode()})


async def _sse(send: Any, receive: Any, messages: AsyncIterator[dict[str, Any]], *, keepalive: bool) -> None:
    """Stream ``messages`` as SSE until they end or the client goes away (then they are closed,
    which tells the instance the call was abandoned)."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
        }
    )
    gone = asyncio.Event()

    async def watch_disconnect() -> None:
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                gone.set()
                return

    watcher = asyncio.ensure_future(watch_disconnect())
    iterator = messages.__aiter__()
    step: asyncio.Future[Any] | None = None
    try:
        while not gone.is_set():
            if step is None:
                step = asyncio.ensure_future(iterator.__anext__())
            waiter: asyncio.Future[Any] = asyncio.ensure_future(gone.wait())
            done, _ = await asyncio.wait(
                [step, waiter], timeout=KEEPALIVE_SECONDS if keepalive else None, return_when=asyncio.FIRST_COMPLETED
            )
            waiter.cancel()
            if step in done:
                try:
                    message = step.result()
                except StopAsyncIteration:
                    step = None
                    break
                step = None
                data = json.dumps(message, separators=(",", ":"))
                body = f"event: message\ndata: {data}\n\n".encode()
                await send({"type": "http.response.body", "body": body, "more_body": True})
            elif not gone.is_set():
                await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b""})
    finally:
        watcher.cancel()
        if step is not None and not step.done():
            step.cancel()
            with contextlib.suppress(BaseException):
                await step
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
