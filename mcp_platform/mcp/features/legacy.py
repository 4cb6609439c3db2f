"""The feature handlers as methods of the handshake-era engine (``Engine._methods``)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

from mcp_platform.mcp.calls import Stream, StreamCallLink
from mcp_platform.mcp.features import completion, prompts, resources
from mcp_platform.mcp.features.paging import Pager
from mcp_platform.mcp.host import Identity, Requester, ToolHost
from mcp_platform.mcp.jsonrpc import Message
from mcp_platform.mcp.sessions import Session, SessionStore

Method = Callable[[Session, Identity, Message, Stream], Awaitable[dict[str, Any]]]


class EngineParts(Protocol):
    host: ToolHost[Any]
    sessions: SessionStore
    pager: Pager

    def call_link(self, session: Session, message: Message, stream: Stream) -> StreamCallLink: ...


class SessionSubscriptions:
    def __init__(self, sessions: SessionStore, session: Session) -> None:
        self._sessions = sessions
        self._session = session

    async def add(self, uri: str) -> bool:
        return await self._sessions.subscribe(self._session, uri)

    async def remove(self, uri: str) -> None:
        await self._sessions.unsubscribe(self._session, uri)


def methods(engine: EngineParts) -> dict[str, Method]:
    host = engine.host
    pager = engine.pager

    @contextlib.contextmanager
    def requester(session: Session, message: Message, stream: Stream) -> Iterator[Requester]:
        """Who asks, and the link through which a handler may ask the client in turn."""
        link = engine.call_link(session, message, stream)
        try:
            yield Requester(
                session_id=session.id,
                client_info=session.client_info,
                protocol_version=session.protocol_version,
                link=link,
            )
        finally:
            link.close()

    async def resources_list(session: Session, identity: Identity, message: Message, stream: Stream) -> dict[str, Any]:
        return await resources.list_resources(host, identity, message.params, pager)

    async def templates_list(session: Session, identity: Identity, message: Message, stream: Stream) -> dict[str, Any]:
        return await resources.list_templates(host, identity, message.params, pager)

    async def resources_read(session: Session, identity: Identity, message: Message, stream: Stream) -> dict[str, Any]:
        with requester(session, message, stream) as asking:
            return await resources.read(host, identity, message.params, asking)

    async def resources_subscribe(
        session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any]:
        subscriptions = SessionSubscriptions(engine.sessions, session)
        return await resources.subscribe(host, identity, message.params, subscriptions)

    async def resources_unsubscribe(
        session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any]:
        subscriptions = SessionSubscriptions(engine.sessions, session)
        return await resources.unsubscribe(host, identity, message.params, subscriptions)

    async def prompts_list(session: Session, identity: Identity, message: Message, stream: Stream) -> dict[str, Any]:
        return await prompts.list_prompts(host, identity, message.params, pager)

    async def prompts_get(session: Session, identity: Identity, message: Message, stream: Stream) -> dict[str, Any]:
        with requester(session, message, stream) as asking:
            return await prompts.get(host, identity, message.params, asking)

    async def completion_complete(
        session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any]:
        return await completion.complete(host, identity, message.params)

    return {
        "resources/list": resources_list,
        "resources/templates/list": templates_list,
        "resources/read": resources_read,
        "resources/subscribe": resources_subscribe,
        "resources/unsubscribe": resources_unsubscribe,
        "prompts/list": prompts_list,
        "prompts/get": prompts_get,
        "completion/complete": completion_complete,
    }
