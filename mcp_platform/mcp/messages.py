"""Every channel-layer message the engine sends or receives, in one table.

A message's ``type`` is two dotted words; a receiver handles it in the method named
after it with the dot turned into an underscore (``"session.ended"`` → ``session_ended``),
as Channels consumers do. Senders build messages with the functions below, never by hand,
so a type can only be spelled one way.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Any

from mcp_platform.mcp.jsonrpc import RequestId

log = logging.getLogger(__name__)


class MessageType(StrEnum):
    # To the process running a call: the client cancelled it.
    MCP_CANCEL = "mcp.cancel"
    # To the process waiting for it: the client's answer to a server→client request.
    MCP_REPLY = "mcp.reply"
    # To every stream hub holding a tenant's streams: what its callers see may have changed.
    CATALOG_CHANGED = "catalog.changed"
    # To the hub holding a session's standalone stream: new events in its log.
    SESSION_EVENTS = "session.events"
    # To the hub holding a session's standalone stream: an operator ended the session.
    SESSION_ENDED = "session.ended"
    # To every stream hub holding a tenant's streams: a 2026-07-28 task changed its state.
    TASK_CHANGED = "task.changed"
    # To every stream hub holding a tenant's streams: a resource's content changed.
    RESOURCE_UPDATED = "resource.updated"


def mcp_cancel() -> dict[str, Any]:
    return {"type": MessageType.MCP_CANCEL}


def mcp_reply(reply: dict[str, Any]) -> dict[str, Any]:
    return {"type": MessageType.MCP_REPLY, "message": reply}


def catalog_changed(tenant_id: int | None) -> dict[str, Any]:
    """``tenant_id`` None: every tenant's catalog."""
    return {"type": MessageType.CATALOG_CHANGED, "tenant_id": tenant_id}


def resource_updated(tenant_id: int | None, uri: str) -> dict[str, Any]:
    """``tenant_id`` None: a platform resource (every tenant's sessions may read it)."""
    return {"type": MessageType.RESOURCE_UPDATED, "tenant_id": tenant_id, "uri": uri}


def session_events(tenant_id: int, session_id: str) -> dict[str, Any]:
    return {"type": MessageType.SESSION_EVENTS, "tenant_id": tenant_id, "session_id": session_id}


def session_ended(tenant_id: int, session_id: str) -> dict[str, Any]:
    return {"type": MessageType.SESSION_ENDED, "tenant_id": tenant_id, "session_id": session_id}


def task_changed(tenant_id: int, task_id: str) -> dict[str, Any]:
    return {"type": MessageType.TASK_CHANGED, "tenant_id": tenant_id, "task_id": task_id}


def dispatch(receiver: object, message: dict[str, Any]) -> None:
    """Call ``receiver.<type with _>(message)``; a type the receiver does not handle is dropped
    (another kind of receiver shares the channel, or a newer process sent it)."""
    kind = message.get("type")
    try:
        handler = getattr(receiver, MessageType(str(kind)).replace(".", "_"))
    except (ValueError, AttributeError):
        log.debug("%s ignores channel-layer message type %r", type(receiver).__name__, kind)
        return
    handler(message)


def reply_id(message: dict[str, Any]) -> RequestId | None:
    """The id of the server→client request an ``mcp.reply`` answers."""
    reply = message.get("message")
    return reply.get("id") if isinstance(reply, dict) else None
