"""A person at a browser, for the connect flow: follows redirects, signs in to Toolbay with a
password, confirms, signs in and consents at the provider's own pages."""

from __future__ import annotations

import html
import re
from urllib.parse import urljoin

import httpx

FORM = re.compile(r"<form[^>]*?(?:action=\"([^\"]*)\")?[^>]*>(.*?)</form>", re.S)
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')


# Toolbay's session cookie of each person, kept between tests: the live server hashes passwords
# as production does (PBKDF2, most of a second per sign-in).
SIGNED_IN: dict[str, str] = {}


class Browser:
    def __init__(self, toolbay_user: str, toolbay_password: str, provider_user: str | None = None) -> None:
        self.user = toolbay_user
        self.password = toolbay_password
        self.provider_user = provider_user or toolbay_user
        self.client = httpx.AsyncClient(timeout=15, follow_redirects=False)
        if toolbay_user in SIGNED_IN:
            self.client.cookies.set("sessionid", SIGNED_IN[toolbay_user], domain="127.0.0.1")
        self.pages: list[httpx.Response] = []

    async def aclose(self) -> None:
        for cookie in self.client.cookies.jar:
            if cookie.name == "sessionid" and cookie.value:
                SIGNED_IN[self.user] = cookie.value
        await self.client.aclose()

    async def go(self, url: str, *, stop_at: str | None = None, max_steps: int = 20) -> httpx.Response | str:
        """Follows ``url`` through redirects and forms until a page without a form (returned),
        or a redirect to a URL starting with ``stop_at`` (returned as a string, not followed)."""
        response = await self.client.get(url)
        for _ in range(max_steps):
            self.pages.append(response)
            if response.is_redirect:
                location = urljoin(str(response.url), response.headers["location"])
                if stop_at is not None and location.startswith(stop_at):
                    return location
                response = await self.client.get(location)
                continue
            match = FORM.search(response.text)
            if response.status_code != 200 or match is None:
                return response
            action = urljoin(str(response.url), html.unescape(match.group(1) or str(response.url)))
            fields = {name: html.unescape(value) for name, value in HIDDEN.findall(match.group(2))}
            if 'name="username"' in match.group(2):  # Toolbay's sign-in
                fields.update(username=self.user, password=self.password)
            elif 'name="login"' in match.group(2):  # the provider's sign-in
                fields.update(login=self.provider_user, password="whatever the provider checks")
            headers = {"Referer": str(response.url)}
            response = await self.client.post(action, data=fields, headers=headers)
        raise AssertionError(f"the flow did not end (last: {response.url})")
