"""/api/v1/sessions/: open MCP sessions, listed and ended as in the operator console."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings

from mcp_platform.mcp import names
from mcp_platform.mcp.sessions import Session, SessionStore, new_session_id
from mcp_platform.redis_clients import async_redis, command_batch, sync_redis

pytestmark = pytest.mark.django_db


async def _store_call(method: str, *args):
    store = SessionStore(async_redis(), command_batch(), idle_seconds=settings.MCP_SESSION_IDLE_SECONDS)
    return await getattr(store, method)(*args)


def open_session(tenant, client: str = "probe") -> Session:
    session = Session(
        id=new_session_id(),
        subject=f"{tenant.pk}:key:1",
        tenant_id=tenant.pk,
        protocol_version="2025-11-25",
        client_info={"name": client, "version": "1.0"},
        credential="bot (0123456789ab…)",
    )
    async_to_sync(_store_call)("create", session)
    return session


def still_open(session: Session) -> bool:
    return async_to_sync(_store_call)("get", session.id) is not None


@pytest.fixture
def sessions(acme, globex) -> dict[str, Session]:
    return {"acme": open_session(acme, "acme-client"), "globex": open_session(globex, "globex-client")}


def listed(client, query: str = "") -> list[tuple[str, str]]:
    response = client.get(f"/api/v1/sessions/{query}")
    assert response.status_code == 200, response.content
    return [(row["tenant"], row["id"]) for row in response.json()]


@pytest.mark.parametrize("role", ["owner", "admin", "operator"])
def test_operators_list_their_tenants_sessions(role, as_role, sessions) -> None:
    response = as_role(role).get("/api/v1/sessions/")
    assert response.status_code == 200
    [row] = response.json()
    assert row["tenant"] == "acme" and row["id"] == sessions["acme"].id
    assert row["client"] == "acme-client 1.0" and row["protocol_version"] == "2025-11-25"
    assert row["credential"] == "bot (0123456789ab…)" and row["stream_holder"] is None


def test_viewers_see_no_sessions(as_role, sessions) -> None:
    assert listed(as_role("viewer")) == []


def test_other_tenants_sessions_stay_hidden(globex_admin, client_for, sessions) -> None:
    assert listed(client_for(globex_admin)) == [("globex", sessions["globex"].id)]
    assert listed(client_for(globex_admin), "?tenant=acme") == []


def test_superuser_sees_every_tenants_sessions(superuser, client_for, sessions) -> None:
    rows = listed(client_for(superuser))
    assert ("acme", sessions["acme"].id) in rows and ("globex", sessions["globex"].id) in rows
    assert listed(client_for(superuser), "?tenant=globex") == [("globex", sessions["globex"].id)]


@pytest.mark.parametrize(("role", "status"), [("owner", 204), ("admin", 204), ("operator", 204), ("viewer", 403)])
def test_who_ends_sessions(role, status, as_role, sessions) -> None:
    session = sessions["acme"]
    response = as_role(role).post("/api/v1/sessions/end/", {"tenant": "acme", "session": session.id}, format="json")
    assert response.status_code == status
    assert still_open(session) == (status != 204)


def test_ending_another_tenants_session_looks_missing(globex_admin, client_for, sessions) -> None:
    client = client_for(globex_admin)
    acme_session = sessions["acme"]
    response = client.post("/api/v1/sessions/end/", {"tenant": "acme", "session": acme_session.id}, format="json")
    assert response.status_code == 400 and list(response.json()) == ["tenant"]
    response = client.post("/api/v1/sessions/end/", {"tenant": "globex", "session": acme_session.id}, format="json")
    assert response.status_code == 404
    assert still_open(acme_session)


def test_ending_an_unknown_session(as_role, sessions) -> None:
    response = as_role("operator").post("/api/v1/sessions/end/", {"tenant": "acme", "session": "nope"}, format="json")
    assert response.status_code == 404
    response = as_role("operator").post("/api/v1/sessions/end/", {"tenant": "acme"}, format="json")
    assert response.status_code == 400 and list(response.json()) == ["session"]


def test_ended_sessions_leave_the_list(as_role, sessions) -> None:
    client = as_role("operator")
    client.post("/api/v1/sessions/end/", {"tenant": "acme", "session": sessions["acme"].id}, format="json")
    assert listed(client) == []


def test_the_tenant_sessions_index_is_pruned_and_expires_as_it_is_written(acme) -> None:
    """The index of a tenant's sessions stays bounded without anyone opening the live view:
    every write drops entries not seen for longer than a session can idle, and the index
    expires with its last session."""
    client = sync_redis()
    index = names.tenant_sessions_key(acme.pk)
    client.zadd(index, {"long-gone": time.time() - 2 * settings.MCP_SESSION_IDLE_SECONDS - 60})
    session = open_session(acme)
    assert [member.decode() for member in client.zrange(index, 0, -1)] == [session.id]
    assert 0 < client.ttl(index) <= settings.MCP_SESSION_IDLE_SECONDS + 31
