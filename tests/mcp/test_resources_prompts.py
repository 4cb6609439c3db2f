"""Resources, resource templates, prompts and completion through the official MCP SDK client,
against the two live server processes: every method, the access rules (a deny for one key,
another tenant's resources answered as "not found"), the audit rows, and the notifications
(list_changed per list and resources/updated), heard on both processes."""

from __future__ import annotations

import asyncio
import base64
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
import redis
from django.conf import settings
from django.db import connection
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import PromptReference, ResourceTemplateReference

from audit.models import Invocation
from conformance.handlers.fixtures import PNG_1PX
from mcp_platform.mcp import names
from tenants.services import api_key_create, tenant_create
from tests.poll import wait_for, wait_for_async
from tools_app.catalog.models import AccessRule, Prompt, Resource, ResourceTemplate

pytestmark = pytest.mark.live

A, B = "live-rp", "live-rp-b"
NOTES = [f"rp://notes/{n}" for n in range(1, 5)]


@pytest.fixture(scope="module")
def world(live_world: Any, django_db_blocker: Any) -> dict[str, Any]:
    """Tenant A: four notes, a binary resource, a template and two prompts, all granted by
    one rule on tag:rp (kind any); the "narrow" key is denied the prompts rp_secret*.
    Tenant B: a private resource of its own."""
    with django_db_blocker.unblock():
        a = tenant_create(slug=A, name="Live RP")
        b = tenant_create(slug=B, name="Live RP B")
        keys = {}
        for label, tenant in (("full", a), ("narrow", a), ("other", b)):
            key, keys[label] = api_key_create(tenant=tenant, name=f"rp {label}")
            keys[f"{label}_id"] = key
        for number, uri in enumerate(NOTES, start=1):
            Resource(tenant=a, uri=uri, name=f"note-{number}", text=f"Note {number}", tags=["rp"]).save()
        Resource(
            tenant=a, uri="rp://logo", name="logo", mime_type="image/png", blob=base64.b64decode(PNG_1PX), tags=["rp"]
        ).save()
        Resource(tenant=b, uri="rp://notes/b", name="b-note", text="B's note", tags=["rp"]).save()
        template = ResourceTemplate(
            tenant=a,
            name="rp-items",
            uri_template="rp://items/{id}",
            mime_type="application/json",
            backend_config={"handler": "conformance.template_data"},
            completions={"id": ["100", "101", "200"]},
            tags=["rp"],
        )
        template.full_clean()
        template.save()
        for name in ("rp_greet", "rp_secret"):
            prompt = Prompt(
                tenant=a,
                name=name,
                description=f"The {name} prompt.",
                arguments=[{"name": "who", "required": True}, {"name": "mood"}],
                messages=[
                    {"role": "user", "content": {"type": "text", "text": "Greet {{who}}{{#mood}}, {{mood}}{{/mood}}."}}
                ],
                completions={"mood": ["happy", "hopeful", "sad"]},
                tags=["rp"],
            )
            prompt.full_clean()
            prompt.save()
        AccessRule.objects.create(tenant=a, kind="any", tool_pattern="tag:rp")
        AccessRule.objects.create(tenant=b, kind="resource", tool_pattern="tag:rp")
        deny = AccessRule.objects.create(tenant=a, kind="prompt", tool_pattern="rp_secret*", effect="deny")
        deny.api_keys.set([keys["narrow_id"]])
    return keys


class Heard:
    """Notifications one client received, by method."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.session_id = ""

    async def handle(self, message: Any) -> None:
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if isinstance(method, str):
            params = getattr(root, "params", None)
            self.messages.append((method, params.model_dump() if params is not None else {}))

    def count(self, method: str, **params: Any) -> int:
        return sum(1 for m, p in self.messages if m == method and all(p.get(k) == v for k, v in params.items()))


@asynccontextmanager
async def connect(server: Any, slug: str, key: str, heard: Heard | None = None) -> AsyncIterator[Client]:
    heard = heard or Heard()

    async def remember_session(response: httpx2.Response) -> None:
        heard.session_id = heard.session_id or response.headers.get("mcp-session-id", "")

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=30, event_hooks={"response": [remember_session]}
    )
    client = Client(
        streamable_http_client(server.endpoint(slug), http_client=http), mode="legacy", message_handler=heard.handle
    )
    async with client:
        # Changes are announced on the standalone GET stream: wait until it has registered
        # (it stores the session's list fingerprints when it does).
        store = redis.Redis.from_url(settings.REDIS_URL)
        try:
            await wait_for_async(
                lambda: bool(heard.session_id) and bool(store.exists(names.session_digest_key(heard.session_id))),
                message="the GET stream",
            )
        finally:
            store.close()
        yield client


async def subscribe(client: Client, uri: str, *, undo: bool = False) -> Any:
    # The SDK warns that 2026-07-28 replaces these with listen(); this is the 2025-11-25 leg.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        if undo:
            return await client.unsubscribe_resource(uri)
        return await client.subscribe_resource(uri)


def in_thread(fn: Callable[[], Any]) -> Any:
    def run() -> Any:
        try:
            return fn()
        finally:
            connection.close()

    return asyncio.to_thread(run)


def test_lists_page_through_resources_templates_and_prompts(server, world):
    async def scenario() -> None:
        async with connect(server, A, world["full"]) as client:
            uris, cursor, pages = [], None, 0
            while True:  # the live servers page by 3
                page = await client.list_resources(cursor=cursor, cache_mode="bypass")
                uris += [str(r.uri) for r in page.resources]
                pages += 1
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert uris == sorted(["rp://logo", *NOTES]) and pages == 2
            listed = (await client.list_resources(cache_mode="bypass")).resources
            logo = next(r for r in listed if str(r.uri) == "rp://logo")
            assert logo.mime_type == "image/png" and logo.size == len(base64.b64decode(PNG_1PX))
            templates = (await client.list_resource_templates(cache_mode="bypass")).resource_templates
            assert [(t.name, t.uri_template) for t in templates] == [("rp-items", "rp://items/{id}")]
            prompts = (await client.list_prompts(cache_mode="bypass")).prompts
            assert [p.name for p in prompts] == ["rp_greet", "rp_secret"]
            assert [(a.name, a.required) for a in prompts[0].arguments] == [("who", True), ("mood", None)]
            with pytest.raises(MCPError) as bad_cursor:
                await client.list_prompts(cursor="forged.cursor", cache_mode="bypass")
            assert bad_cursor.value.error.code == -32602

        async with connect(server, A, world["narrow"]) as client:
            assert [p.name for p in (await client.list_prompts(cache_mode="bypass")).prompts] == ["rp_greet"]

    asyncio.run(scenario())


def test_reads_text_binary_and_template_resources_and_audits_them(server, other_server, world, orm):
    async def scenario() -> None:
        async with connect(other_server, A, world["full"]) as client:
            text = await client.read_resource("rp://notes/1", cache_mode="bypass")
            assert [(str(c.uri), c.text) for c in text.contents] == [("rp://notes/1", "Note 1")]
            blob = await client.read_resource("rp://logo", cache_mode="bypass")
            assert blob.contents[0].mime_type == "image/png" and blob.contents[0].blob == PNG_1PX
            item = await client.read_resource("rp://items/42", cache_mode="bypass")
            assert item.contents[0].text == '{"id":"42","templateTest":true,"data":"Data for ID: 42"}'
            assert item.contents[0].mime_type == "application/json"

    asyncio.run(scenario())
    tenant_rows = Invocation.objects.filter(tenant__slug=A, kind=Invocation.Kind.RESOURCE)
    wait_for(lambda: tenant_rows.count() >= 3, message="the three reads' invocation rows")
    rows = {row.tool_name: row for row in tenant_rows}
    assert {"rp://notes/1", "rp://logo", "rp://items/42"} <= set(rows)
    assert rows["rp://items/42"].arguments == {"id": "42"}
    assert all(row.outcome == "completed" and row.key_label.startswith("rp full") for row in rows.values())


def test_unknown_and_foreign_resources_are_the_same_not_found(server, world):
    async def scenario() -> None:
        async with connect(server, A, world["full"]) as client:
            errors = []
            for uri in ("rp://notes/b", "rp://nothing-here"):
                with pytest.raises(MCPError) as excinfo:
                    await client.read_resource(uri, cache_mode="bypass")
                errors.append(excinfo.value.error)
                with pytest.raises(MCPError) as refused:
                    await subscribe(client, uri)
                assert refused.value.error.code == -32002
            assert [(e.code, e.message) for e in errors] == [(-32002, "Resource not found")] * 2
            assert [e.data for e in errors] == [{"uri": "rp://notes/b"}, {"uri": "rp://nothing-here"}]
        async with connect(server, B, world["other"]) as client:
            assert [str(r.uri) for r in (await client.list_resources(cache_mode="bypass")).resources] == [
                "rp://notes/b"
            ]
            assert (await client.read_resource("rp://notes/b", cache_mode="bypass")).contents[0].text == "B's note"
            assert (await client.list_prompts(cache_mode="bypass")).prompts == []  # its rule grants resources only
            with pytest.raises(MCPError) as excinfo:
                await client.read_resource("rp://notes/1", cache_mode="bypass")
            assert excinfo.value.error.code == -32002

    asyncio.run(scenario())


def test_prompts_render_their_arguments_and_refuse_what_is_missing_or_denied(server, world):
    async def scenario() -> None:
        async with connect(server, A, world["full"]) as client:
            plain = await client.get_prompt("rp_greet", {"who": "Ada"})
            assert plain.description == "The rp_greet prompt."
            assert [(m.role, m.content.text) for m in plain.messages] == [("user", "Greet Ada.")]
            moody = await client.get_prompt("rp_greet", {"who": "<Ada>", "mood": "happy & well"})
            assert moody.messages[0].content.text == "Greet <Ada>, happy & well."  # not HTML-escaped
            with pytest.raises(MCPError) as missing:
                await client.get_prompt("rp_greet", {"mood": "sad"})
            assert (missing.value.error.code, missing.value.error.message) == (-32602, "Missing required argument: who")
            assert (await client.get_prompt("rp_secret", {"who": "x"})).messages
        async with connect(server, A, world["narrow"]) as client:
            for name in ("rp_secret", "no_such_prompt"):
                with pytest.raises(MCPError) as excinfo:
                    await client.get_prompt(name, {"who": "x"})
                assert (excinfo.value.error.code, excinfo.value.error.message) == (-32602, f"Unknown prompt: {name}")

    asyncio.run(scenario())


def test_completion_of_prompt_arguments_and_template_variables(server, world):
    async def scenario() -> None:
        async with connect(server, A, world["full"]) as client:
            mood = await client.complete(
                PromptReference(type="ref/prompt", name="rp_greet"), {"name": "mood", "value": "h"}
            )
            assert mood.completion.values == ["happy", "hopeful"] and mood.completion.total == 2
            item = await client.complete(
                ResourceTemplateReference(type="ref/resource", uri="rp://items/{id}"), {"name": "id", "value": "10"}
            )
            assert item.completion.values == ["100", "101"]
            nothing = await client.complete(
                PromptReference(type="ref/prompt", name="rp_greet"), {"name": "who", "value": ""}
            )
            assert nothing.completion.values == []
        async with connect(server, A, world["narrow"]) as client:
            with pytest.raises(MCPError) as excinfo:
                await client.complete(
                    PromptReference(type="ref/prompt", name="rp_secret"), {"name": "mood", "value": ""}
                )
            assert excinfo.value.error.code == -32602

    asyncio.run(scenario())


def _edit_note(uri: str, text: str) -> None:
    resource = Resource.objects.get(tenant__slug=A, uri=uri)
    resource.text = text
    resource.save()


def _retitle_note(uri: str, title: str) -> None:
    resource = Resource.objects.get(tenant__slug=A, uri=uri)
    resource.title = title
    resource.save()


def test_subscribers_on_both_processes_hear_of_changed_content(server, other_server, world, orm):
    async def scenario() -> None:
        on_a, on_b, late, bystander = Heard(), Heard(), Heard(), Heard()
        updated = "notifications/resources/updated"
        async with (
            connect(server, A, world["full"], on_a) as first,
            connect(other_server, A, world["full"], on_b) as second,
            connect(server, A, world["full"], late) as third,
            connect(server, A, world["full"], bystander),
        ):
            assert (await subscribe(first, "rp://notes/2")).model_dump(exclude_none=True) == {}
            await subscribe(second, "rp://notes/2")
            await subscribe(second, "rp://items/7")  # a template's URI can be watched too
            await in_thread(lambda: _edit_note("rp://notes/2", "Note 2, edited"))
            await wait_for_async(
                lambda: on_a.count(updated, uri="rp://notes/2") == 1, message="the update on process A"
            )
            await wait_for_async(
                lambda: on_b.count(updated, uri="rp://notes/2") == 1, message="the update on process B"
            )
            # The listing changed too (size, lastModified): everyone hears that, only subscribers the update
            # (the bystander is on process A, whose round for the update has run).
            await wait_for_async(
                lambda: bystander.count("notifications/resources/list_changed") >= 1, message="list_changed"
            )
            assert bystander.count(updated) == 0 and late.count(updated) == 0
            assert (await second.read_resource("rp://notes/2", cache_mode="bypass")).contents[
                0
            ].text == "Note 2, edited"

            assert (await subscribe(first, "rp://notes/2", undo=True)).model_dump(exclude_none=True) == {}
            await subscribe(third, "rp://notes/2")
            await in_thread(lambda: _retitle_note("rp://notes/2", "Not a content change"))
            await in_thread(lambda: _edit_note("rp://notes/2", "Note 2, edited twice"))
            await wait_for_async(lambda: on_b.count(updated, uri="rp://notes/2") == 2, message="the second update on B")
            await wait_for_async(
                lambda: late.count(updated, uri="rp://notes/2") == 1, message="the update of the late subscriber"
            )
            assert on_a.count(updated) == 1  # unsubscribed; and a new title is no content change
            assert on_b.count(updated, uri="rp://items/7") == 0

    asyncio.run(scenario())


def _add_prompt(name: str) -> None:
    prompt = Prompt(
        tenant_id=Prompt.objects.get(name="rp_greet").tenant_id,
        name=name,
        description="Added while clients listen.",
        messages=[{"role": "user", "content": {"type": "text", "text": "Hello."}}],
        tags=["rp"],
    )
    prompt.full_clean()
    prompt.save()


def test_list_changed_reaches_exactly_the_sessions_whose_list_moved(server, other_server, world, orm):
    async def scenario() -> None:
        full_a, full_b, narrow, other = Heard(), Heard(), Heard(), Heard()
        async with (
            connect(server, A, world["full"], full_a),
            connect(other_server, A, world["full"], full_b),
            connect(server, A, world["narrow"], narrow),
            connect(other_server, B, world["other"], other),
        ):
            prompts_changed = "notifications/prompts/list_changed"
            await in_thread(lambda: _add_prompt("rp_added"))
            for heard in (full_a, full_b, narrow):
                await wait_for_async(
                    lambda heard=heard: heard.count(prompts_changed) == 1, message="prompts/list_changed"
                )
            await in_thread(lambda: _add_prompt("rp_secret_added"))  # denied to the narrow key
            for heard in (full_a, full_b):
                await wait_for_async(
                    lambda heard=heard: heard.count(prompts_changed) == 2, message="the second list_changed"
                )
            for heard in (full_a, full_b, narrow, other):
                assert heard.count("notifications/tools/list_changed") == 0
                assert heard.count("notifications/resources/list_changed") == 0
            assert narrow.count(prompts_changed) == 1
            assert other.messages == []

    asyncio.run(scenario())
