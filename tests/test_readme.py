"""Every Python snippet of README.md runs, so the README cannot drift from the code.

Each snippet is claimed by one runner below (a new snippet without one fails
``test_every_snippet_is_run``). The path they prove is the README's own: *Your first tool*
is copied into a module named in ``TOOLBAY_HANDLER_MODULES`` of a live server, a platform
admin registers a tool bound to its handler and grants it to ``demo`` in the admin, and the
SDK client of *API keys and clients* sees and calls it, answering its confirmation with the
callback of *Confirmation before consequential calls*.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib
import io
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client as DjangoClient
from django.urls import reverse
from mcp.client.auth.oauth2 import OAuthClientProvider
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from tenants.models import ApiKey, Tenant
from tenants.services import api_key_create
from tests.mcp.live import LiveServer, start_server
from tests.tools_app.admin_forms import rule_data, tool_data
from tools_app.backends.python.registry import is_offered
from tools_app.catalog.models import AccessRule, Tool

pytestmark = pytest.mark.live

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)

# What makes each snippet recognisable, by runner.
MARKERS = {
    "first_tool": "@tool_handler(",
    "resources": "client.list_resources()",
    "sdk_client": "asyncio.run(main())",
    "confirm": "ElicitResult(",
    "oauth_client": "OAuthClientProvider(",
}


def snippet(name: str) -> str:
    (found,) = [text for text in SNIPPETS if MARKERS[name] in text]
    return found


def replaced(text: str, old: str, new: str) -> str:
    """``text`` with ``old`` replaced; the README must still say ``old``."""
    assert old in text, f"the README snippet no longer contains {old!r}"
    return text.replace(old, new)


def test_every_snippet_is_run() -> None:
    assert SNIPPETS
    for text in SNIPPETS:
        claimed = [name for name, marker in MARKERS.items() if marker in text]
        assert len(claimed) == 1, f"a README snippet needs exactly one runner here, has {claimed}:\n{text}"
    assert {name for name in MARKERS if any(MARKERS[name] in text for text in SNIPPETS)} == set(MARKERS)


CONFORMANCE_GREET_ASIDE = "greet-conformance-aside"


class ReadmeSite:
    def __init__(self, server: LiveServer, key: str) -> None:
        self.server = server
        self.key = key

    @property
    def url(self) -> str:
        return self.server.endpoint("demo")


@pytest.fixture(scope="module")
def site(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReadmeSite]:
    tmp = tmp_path_factory.mktemp("readme")
    # "Put it in a module of your own, say acme_tools.py … and name that module in
    # TOOLBAY_HANDLER_MODULES=acme_tools": the live server does exactly that; this process
    # imports it too, because the admin it drives checks the handler is registered.
    (tmp / "acme_tools.py").write_text(snippet("first_tool"))
    sys.path.insert(0, str(tmp))
    importlib.import_module("acme_tools")
    with django_db_blocker.unblock():
        call_command("seed_demo", stdout=io.StringIO())
        key, raw_key = api_key_create(tenant=Tenant.objects.get(slug="demo"), name="readme")
        # The conformance pack (seeded when the live MCP tests ran first in this database) has a
        # platform tool named "greet" too; the README's steps need the name free, so that row
        # steps aside for this module (a plain UPDATE: no version bump, nothing published).
        aside = Tool.objects.filter(name="greet", tenant=None).update(name=CONFORMANCE_GREET_ASIDE)
    path = os.pathsep.join(filter(None, [str(tmp), os.environ.get("PYTHONPATH")]))
    # The default page size: the README's client reads one page of tools/list.
    env = {"TOOLBAY_HANDLER_MODULES": "acme_tools", "PYTHONPATH": path, "MCP_PAGE_SIZE": "100"}
    server = start_server(tmp, "readme", env)
    try:
        yield ReadmeSite(server, raw_key)
    finally:
        server.stop()
        sys.path.remove(str(tmp))
        with django_db_blocker.unblock():
            AccessRule.objects.filter(tool__name="greet", tool__tenant=None).delete()
            Tool.objects.filter(name="greet", tenant=None).delete()
            if aside:
                Tool.objects.filter(name=CONFORMANCE_GREET_ASIDE, tenant=None).update(name="greet")
            ApiKey.objects.filter(pk=key.pk).delete()


def register_greet_in_the_admin(django_db_blocker: Any) -> None:
    """Steps 1 and 2 of *Your first tool*, as a platform admin in the admin."""
    with django_db_blocker.unblock():
        admin = DjangoClient()
        admin.force_login(get_user_model().objects.get(username="admin"))
        tool = tool_data(
            name="greet",
            title="",
            description="Greets someone by name.",
            input_schema=json.dumps(
                {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
            ),
            read_only_hint="unknown",
            tags="",
            handler="acme.greet",
        )
        response = admin.post(reverse("admin:tools_app_tool_add"), tool)
        assert response.status_code == 302, response.context["adminform"].form.errors
        greet = Tool.objects.get(name="greet", tenant=None)
        rule = rule_data(tool=greet.pk, tenant=Tenant.objects.get(slug="demo").pk, note="README: your first tool")
        assert admin.post(reverse("admin:tools_app_accessrule_add"), rule).status_code == 302


def run_printing(code: str, namespace: dict[str, Any]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), namespace)
    return out.getvalue()


def test_the_first_tool_is_registered_and_called_as_the_readme_says(site: ReadmeSite, django_db_blocker: Any) -> None:
    # Offered to the platform catalog only (the default), as the README says.
    assert is_offered("tool", "acme.greet", None) and not is_offered("tool", "acme.greet", "demo")
    register_greet_in_the_admin(django_db_blocker)

    # *API keys and clients*: the SDK client, pointed at this server with a demo key.
    program = replaced(snippet("sdk_client"), 'URL = "http://127.0.0.1:8000/mcp/demo"', f'URL = "{site.url}"')
    program = replaced(program, 'KEY = "tbk_..."', f'KEY = "{site.key}"')
    printed = run_printing(program, {"__name__": "__main__"}).splitlines()
    assert "greet" in ast.literal_eval(printed[0])  # the tool granted to demo in the admin
    assert printed[1] == "{'sum': 42}"

    # The tool has no annotations, so (policy "destructive") the client's user confirms: with
    # the README's callback.
    confirm_namespace: dict[str, Any] = {}
    run_printing(snippet("confirm"), confirm_namespace)

    async def call_greet() -> tuple[Any, Any]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {site.key}"}, timeout=30)
        callback = confirm_namespace["confirm"]
        async with http, Client(streamable_http_client(site.url, http_client=http), elicitation_callback=callback) as c:
            return await c.call_tool("greet", {"name": "Ada"}), await c.call_tool("greet", {"name": " "})

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        greeted, refused = asyncio.run(call_greet())
    assert "Greet" in out.getvalue() and "Ada" in out.getvalue()  # the confirmation's message
    assert greeted.is_error is False and greeted.content[0].text == "Hello, Ada!"
    assert refused.is_error is True and refused.content[0].text == "Say whom to greet: 'name' is empty."


def test_the_resource_and_prompt_snippet(site: ReadmeSite) -> None:
    code = compile(snippet("resources"), str(README), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)

    async def scenario() -> str:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {site.key}"}, timeout=30)
        async with http, Client(streamable_http_client(site.url, http_client=http)) as client:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                await eval(code, {"client": client})
            return out.getvalue()

    printed = asyncio.run(scenario()).splitlines()
    assert printed[0] == "['demo://readme']"
    assert printed[1].startswith("It is ") and "in Europe/Paris" in printed[1]
    assert printed[2].startswith("Explain tides to someone at the beginner level")


class MemoryTokenStorage:
    """The ``my_token_storage`` the README leaves to the reader (the SDK's TokenStorage)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


def test_the_oauth_client_snippet_builds_the_sdks_provider() -> None:
    async def open_browser(url: str) -> None: ...

    async def wait_for_callback() -> tuple[str, str | None]:
        return "code", None

    namespace: dict[str, Any] = {
        "my_token_storage": MemoryTokenStorage(),
        "open_browser": open_browser,
        "wait_for_callback": wait_for_callback,
    }
    run_printing(snippet("oauth_client"), namespace)
    provider = namespace["provider"]
    assert isinstance(provider, OAuthClientProvider)
    assert namespace["http"].auth is provider
    assert provider.context.server_url == "http://127.0.0.1:8000/mcp/demo"
