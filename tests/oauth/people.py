"""The OAuth tests' world and people: who signs in with which password, and a person at a
browser answering Toolbay's login and consent pages."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

from tests.oauth.servers import ExternalIssuer, MetadataDocumentHost

PASSWORDS = {"olivia": "olivia-pw-1", "mallory": "mallory-pw-1"}
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@dataclass
class OAuthWorld:
    issuer: ExternalIssuer
    documents: MetadataDocumentHost
    keys: dict[str, str] = field(default_factory=dict)


class Person:
    """Someone at a browser: signs in on Toolbay's login page and answers consent pages, over
    plain HTTP. ``approve`` returns the authorization response's query parameters."""

    def __init__(self, username: str) -> None:
        self.username = username
        self.http = httpx.Client(follow_redirects=False, timeout=30)
        self.consents_seen = 0

    def close(self) -> None:
        self.http.close()

    def _csrf(self, page: httpx.Response) -> str:
        match = CSRF.search(page.text)
        assert match is not None, f"no form on {page.url}: HTTP {page.status_code} {page.text[:300]}"
        return match.group(1)

    def approve(self, url: str, *, decision: str = "approve") -> dict[str, str]:
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
        page = self.http.get(url)
        if page.status_code == 302 and "/oauth/login/" in page.headers["location"]:
            login = urljoin(origin, page.headers["location"])
            form = self.http.get(login)
            next_path = parse_qs(urlsplit(login).query)["next"][0]
            signed_in = self.http.post(
                login,
                data={
                    "csrfmiddlewaretoken": self._csrf(form),
                    "username": self.username,
                    "password": PASSWORDS[self.username],
                    "next": next_path,
                },
                headers={"Referer": login},
            )
            assert signed_in.status_code == 302, signed_in.text[:500]
            page = self.http.get(url)
        if page.status_code == 200:
            self.consents_seen += 1
            self.last_consent_page = page.text
            page = self.http.post(
                url, data={"csrfmiddlewaretoken": self._csrf(page), "decision": decision}, headers={"Referer": url}
            )
        assert page.status_code == 302, f"HTTP {page.status_code}: {page.text[:500]}"
        location = page.headers["location"]
        return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}
