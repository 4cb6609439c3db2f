"""The process's upstream sessions when calls carry each user's own token: one session per
user (never shared, whatever the timing), a new token of the same user replaces theirs, and
only the most recently used users' sessions are kept. (The live proof, against a server that
binds sessions to credentials: tests/connections/test_upstream_user_credential.py.)"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tools_app.backends.upstream import client
from tools_app.backends.upstream.client import USER_SCOPE, UpstreamEndpoint, shared_session

SERVICE = UpstreamEndpoint(
    id=7,
    name="mail",
    url="https://mcp.example.com/mcp",
    headers=(("Authorization", "Bearer service-token"),),
    secret_values=("service-token",),
    timeout_seconds=5,
)


def _as(user: str, token: str) -> UpstreamEndpoint:
    return replace(SERVICE, headers=(("Authorization", f"Bearer {token}"),), scope=f"{USER_SCOPE}{user}")


def test_each_user_has_a_session_of_their_own_and_a_new_token_replaces_it() -> None:
    async def scenario() -> None:
        service = shared_session(SERVICE)
        alice, bob = shared_session(_as("alice", "a1")), shared_session(_as("bob", "b1"))
        assert len({id(service), id(alice), id(bob)}) == 3
        assert shared_session(_as("alice", "a1")) is alice  # the same user, the same token
        refreshed = shared_session(_as("alice", "a2"))
        assert refreshed is not alice and refreshed.endpoint.headers == (("Authorization", "Bearer a2"),)
        assert shared_session(_as("bob", "b1")) is bob and shared_session(SERVICE) is service

    asyncio.run(scenario())


def test_only_the_most_recently_used_users_sessions_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "USER_SESSIONS_KEPT", 3)

    async def scenario() -> None:
        service = shared_session(SERVICE)
        first = {user: shared_session(_as(user, f"{user}-token")) for user in ("u1", "u2", "u3")}
        assert shared_session(_as("u1", "u1-token")) is first["u1"]  # u1 used again: u2 is now the oldest
        shared_session(_as("u4", "u4-token"))
        assert shared_session(_as("u1", "u1-token")) is first["u1"]
        assert shared_session(_as("u3", "u3-token")) is first["u3"]
        assert shared_session(_as("u2", "u2-token")) is not first["u2"]  # ended, made anew
        assert shared_session(SERVICE) is service  # the service's session is not a user's
        await asyncio.gather(*client._closing)

    asyncio.run(scenario())
