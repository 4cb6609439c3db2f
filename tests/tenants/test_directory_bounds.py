"""The tenant directory's bounds and its safety net: unknown slugs leave nothing behind and
cost one query each, locks and "last used" times are pruned, and a change whose generation
bump was lost is still seen once the record is MAX_AGE_SECONDS old."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext

from mcp_platform import generations
from tenants import auth
from tenants.auth import AuthFailure, TenantDirectory
from tenants.services import api_key_revoke, tenant_create
from tests.poll import wait_for


def refused(directory: TenantDirectory, slug: str, raw_key: str) -> bool:
    try:
        async_to_sync(directory.authenticate)(slug, f"Bearer {raw_key}")
    except AuthFailure:
        return True
    return False


@pytest.mark.django_db
def test_an_unknown_slug_costs_one_query_while_it_is_remembered() -> None:
    directory = TenantDirectory()

    async def ask(times: int) -> list[object]:
        return [await directory.tenant("no-such-tenant") for _ in range(times)]

    with CaptureQueriesContext(connection) as queries:
        assert async_to_sync(ask)(200) == [None] * 200
    assert len(queries) == 1
    assert directory.missing_stats.hits >= 199


@pytest.mark.django_db
def test_concurrent_requests_for_one_unknown_slug_share_one_query() -> None:
    directory = TenantDirectory()

    async def ask() -> list[object]:
        return await asyncio.gather(*(directory.tenant("no-such-tenant") for _ in range(50)))

    with CaptureQueriesContext(connection) as queries:
        assert async_to_sync(ask)() == [None] * 50
    assert len(queries) == 1
    assert directory.held()["loads"] == 0


@pytest.mark.django_db
def test_a_scan_of_random_slugs_leaves_bounded_state_and_no_memory_growth(monkeypatch) -> None:
    monkeypatch.setattr(auth, "MAX_MISSING", 100)
    directory = TenantDirectory()

    async def scan(start: int, count: int) -> None:
        for i in range(start, start + count):
            assert await directory.tenant(f"scan-{i:08d}") is None

    async def grown_by_scan() -> int:
        # One event loop throughout: each new loop gets its own Redis client, not the directory's doing.
        await scan(0, 300)  # fill the bounded structures (and their tables' sizes)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        await scan(300, 600)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before

    tracemalloc.start()  # before the warm-up: what the scan frees must have been traced too
    try:
        grown = async_to_sync(grown_by_scan)()
    finally:
        tracemalloc.stop()
    assert directory.held() == {"records": 0, "missing": 100, "loads": 0, "last_used": 0, "shared_checks": 0}
    assert directory.missing_stats.evictions == 800
    # Slugs of the same length replace each other: nothing per slug scanned is kept.
    assert grown < 4 * 1024, grown


@pytest.mark.django_db
def test_the_safety_net_reloads_a_record_whose_change_lost_its_bump(monkeypatch, make_key) -> None:
    """A key revoked while the generation bump failed (Redis missed it) is refused once the
    record is MAX_AGE_SECONDS old: the age check really reloads."""
    tenant = tenant_create(slug="acme", name="Acme")
    key, raw = make_key(tenant)
    directory = TenantDirectory()
    assert not refused(directory, "acme", raw)

    def lost(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Redis went away")

    monkeypatch.setattr(generations, "bump", lost)
    api_key_revoke(key=key)  # its bump is lost (in a test transaction it is not even attempted)
    assert not refused(directory, "acme", raw)  # the generation did not move: the record is kept
    monkeypatch.setattr(auth, "MAX_AGE_SECONDS", 0.3)
    wait_for(lambda: refused(directory, "acme", raw), timeout=10, message="the revoked key refused after max age")
    assert directory.stats.misses >= 2


@pytest.mark.django_db
def test_last_used_times_are_kept_only_for_keys_used_within_the_interval(monkeypatch, acme, make_key) -> None:
    monkeypatch.setattr(auth, "_touch_key", lambda key_id: None)  # the row write is not under test
    keys = [make_key(acme, f"key {i}") for i in range(3)]
    directory = TenantDirectory()
    for _, raw in keys:
        assert not refused(directory, "acme", raw)
    assert directory.held()["last_used"] == 3
    monkeypatch.setattr(auth, "LAST_USED_WRITE_INTERVAL", 0.0)  # every earlier write is now old
    assert not refused(directory, "acme", keys[0][1])
    assert directory.held()["last_used"] == 1


@pytest.mark.django_db
def test_records_past_max_entries_go_least_recently_used_first(monkeypatch) -> None:
    monkeypatch.setattr(auth, "MAX_ENTRIES", 2)
    for slug in ("t1", "t2", "t3"):
        tenant_create(slug=slug, name=slug)
    directory = TenantDirectory()

    async def walk(*slugs: str) -> None:
        for slug in slugs:
            assert (await directory.tenant(slug)) is not None

    async_to_sync(walk)("t1", "t2", "t1", "t3")  # t2 is the least recently used when t3 comes
    assert list(directory._entries) == ["t1", "t3"] and directory.stats.evictions == 1


@pytest.mark.django_db
def test_a_new_generation_reloads_and_a_current_one_does_not(acme) -> None:
    directory = TenantDirectory()
    first = async_to_sync(directory.tenant)("acme")
    assert async_to_sync(directory.tenant)("acme") is first
    generations.bump(["acme"])
    second = async_to_sync(directory.tenant)("acme")
    assert second is not first and second is not None and second.generation != first.generation


@pytest.mark.django_db
def test_requests_of_one_key_share_its_principal_until_the_record_reloads(monkeypatch, acme, make_key) -> None:
    """A thousand sessions of one key hold one principal; a change to the tenant (say the key's
    scopes) makes a new record, and with it a principal as the change left the key."""
    monkeypatch.setattr(auth, "_touch_key", lambda key_id: None)  # the row write is not under test
    key, raw = make_key(acme)
    directory = TenantDirectory()
    first = async_to_sync(directory.authenticate)("acme", f"Bearer {raw}")
    assert async_to_sync(directory.authenticate)("acme", f"Bearer {raw}") is first
    assert (first.key_id, first.key_name, first.tenant_slug) == (key.pk, key.name, "acme")
    key.scopes = ["tools:call"]
    key.save(update_fields=["scopes"])
    generations.bump(["acme"])
    changed = async_to_sync(directory.authenticate)("acme", f"Bearer {raw}")
    assert changed is not first and changed.scopes == frozenset({"tools:call"})
