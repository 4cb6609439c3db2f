"""The person at the browser, for the conformance suite's authorization-server scenarios.

``conformance authorization`` prints an authorization URL and waits for a browser to bring
the authorization response to its callback server. This script reads the suite's output on
stdin (passing it through), and for each authorization URL it sees it does what a person
would: signs in on Toolbay's login page, approves the consent page and follows the redirect
to the suite's callback. All over plain HTTP with a cookie jar, so ``make test`` needs no
browser.

Usage: node … authorization … | python conformance/auth_user.py <username> <password>
"""

from __future__ import annotations

import re
import sys
import threading
from urllib.parse import urljoin, urlsplit

import httpx

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
AUTHORIZE_URL = re.compile(r"^(https?://\S+/authorize\?\S+)$")


def _csrf(page: httpx.Response) -> str:
    match = CSRF.search(page.text)
    if match is None:
        raise RuntimeError(f"no CSRF token on {page.url} (HTTP {page.status_code})")
    return match.group(1)


def authorize(url: str, username: str, password: str) -> None:
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    with httpx.Client(follow_redirects=False, timeout=30) as http:
        page = http.get(url)
        if page.status_code == 302 and "/oauth/login/" in page.headers["location"]:
            login_url = urljoin(origin, page.headers["location"])
            form = http.get(login_url)
            answer = http.post(
                login_url,
                data={"csrfmiddlewaretoken": _csrf(form), "username": username, "password": password,
                      "next": urlsplit(url).path + "?" + urlsplit(url).query},
                headers={"Referer": login_url},
            )  # fmt: skip
            if answer.status_code != 302:
                raise RuntimeError(f"sign-in failed (HTTP {answer.status_code})")
            page = http.get(url)
        if page.status_code == 200:  # the consent page
            page = http.post(
                url, data={"csrfmiddlewaretoken": _csrf(page), "decision": "approve"}, headers={"Referer": url}
            )
        if page.status_code != 302:
            raise RuntimeError(f"authorization did not redirect (HTTP {page.status_code}): {page.text[:300]}")
        callback = page.headers["location"]
        print(f"[auth_user] authorized; following the redirect to {callback.split('?')[0]}", flush=True)
        http.get(callback)


def main() -> int:
    username, password = sys.argv[1], sys.argv[2]
    failures: list[str] = []
    for line in sys.stdin:
        sys.stdout.write(line)
        sys.stdout.flush()
        match = AUTHORIZE_URL.match(line.strip())
        if match:

            def run(url: str = match.group(1)) -> None:
                try:
                    authorize(url, username, password)
                except Exception as exc:
                    failures.append(str(exc))
                    print(f"[auth_user] could not authorize: {exc}", flush=True)

            # The suite starts its callback server as it prints the URL; do not block the pipe.
            threading.Thread(target=run, daemon=True).start()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
