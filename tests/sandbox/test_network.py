"""A sandbox reaches only the hosts its policy lists, each vetted by the SSRF guard first.

The "allowed host" is a loopback HTTP server that the operator opened by exactly its
``127.0.0.1:PORT`` (``TOOLBAY_OUTBOUND_ALLOWED_HOSTS``, as tests/backends do) and that the
server's policy lists: the guard stays as strict for every other address. Refusals are
proved before any connection: a second loopback server, listening, counts zero requests;
the metadata and private addresses are refused by the guard with its reason (nothing in
these tests ever connects to them).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tools_app.backends.http import netguard
from tools_app.backends.packaged.node_proxy import undici_dir
from tools_app.backends.packaged.sandbox import SandboxSpec, egress_of, spawn
from tools_app.backends.packaged.sandbox_egress import HostPolicy

# Runs inside the sandbox with the system Python: tries each URL through the proxy variables,
# then a direct connection, and prints what happened as JSON.
PROBE = r"""
import json, socket, sys, urllib.request, urllib.error
out = {}
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            out[url] = [response.status, response.read().decode()]
    except urllib.error.HTTPError as exc:
        out[url] = [exc.code, exc.read().decode()]
    except OSError as exc:
        out[url] = ["error", str(exc)]
for host, port in (("127.0.0.1", int(sys.argv[1].rsplit(":", 1)[1].split("/")[0])), ("1.1.1.1", 80)):
    try:
        socket.create_connection((host, port), timeout=3).close()
        out[f"direct {host}"] = "connected"
    except OSError as exc:
        out[f"direct {host}"] = str(exc)
print(json.dumps(out))
"""

ADDRESSES = {"metadata.test": ["169.254.169.254"], "intranet.test": ["10.1.2.3"], "rebind.test": ["127.0.0.1"]}


@pytest.fixture
def names(monkeypatch):
    """Names that resolve to the addresses an attacker would aim at (no DNS involved)."""
    system = netguard.resolver

    async def resolve(host: str, port: int) -> list[str]:
        return ADDRESSES.get(host) or await system(host, port)

    monkeypatch.setattr(netguard, "resolver", resolve)


def test_policy_entries_parse_strictly():
    policy = HostPolicy.parse(("api.example.com", "127.0.0.1:8080", "[::1]:9000", "Example.ORG."))
    assert policy.allows("api.example.com", 443) and policy.allows("api.example.com", 80)
    assert not policy.allows("api.example.com", 8443)
    assert policy.allows("127.0.0.1", 8080) and not policy.allows("127.0.0.1", 8081)
    assert policy.allows("::1", 9000) and policy.allows("example.org", 443)
    assert not policy.allows("sub.api.example.com", 443)
    for bad in ("http://x.example", "x.example:99999", "*.example.com", "user@host", "a:b:c"):
        with pytest.raises(ValueError, match="expected HOST or HOST:PORT"):
            HostPolicy.parse((bad,))


async def test_only_listed_hosts_reachable_and_guard_refuses_before_connect(
    loopback_sites, settings, names, empty_package
):
    allowed = loopback_sites(b"hello from the allowed host")
    other = loopback_sites(b"should never be read")
    settings.TOOLBAY_OUTBOUND_ALLOWED_HOSTS = [f"127.0.0.1:{allowed.port}"]
    listed = (
        f"127.0.0.1:{allowed.port}",
        "169.254.169.254",  # listed by a careless tenant: the guard still refuses
        "metadata.test",
        "intranet.test",
        f"rebind.test:{other.port}",  # a name pointing at loopback, not opened by the operator
    )
    urls = [
        f"http://127.0.0.1:{allowed.port}/page",
        f"http://127.0.0.1:{other.port}/page",  # not listed
        f"http://localhost:{allowed.port}/page",  # names are compared exactly
        "http://169.254.169.254/latest/meta-data/",
        "https://169.254.169.254/latest/meta-data/",  # CONNECT
        "http://metadata.test/latest/meta-data/",
        "https://intranet.test/",
        f"http://rebind.test:{other.port}/page",
    ]
    spec = SandboxSpec(
        package_dir=empty_package,
        argv=["/usr/bin/python3", "-I", "-c", PROBE, *urls],
        env={},
        allow_hosts=listed,
    )
    process = await spawn(spec)
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    seen = json.loads(out)

    assert seen[urls[0]] == [200, "hello from the allowed host"]
    assert allowed.hits == ["/page"]
    assert seen[urls[1]][0] == 403 and "not in this server's allowed hosts" in seen[urls[1]][1]
    assert seen[urls[2]][0] == 403
    assert seen[urls[3]][0] == 403 and "cloud metadata address" in seen[urls[3]][1]
    assert seen[urls[4]][0] == "error" and "403" in seen[urls[4]][1]  # the tunnel was refused
    assert seen[urls[5]][0] == 403 and "resolves to 169.254.169.254, a cloud metadata address" in seen[urls[5]][1]
    assert seen[urls[7]][0] == 403 and "a loopback address" in seen[urls[7]][1]
    assert other.hits == []  # listening all along, never reached
    refusals = "\n".join(egress_of(process).refusals)
    assert "intranet.test:443: host 'intranet.test' resolves to 10.1.2.3, a private address" in refusals
    assert egress_of(process).connections == 1
    # No route out but the proxy: the sandbox's own loopback has nothing, the world is unreachable.
    assert "refused" in seen["direct 127.0.0.1"].lower()
    assert "unreachable" in seen["direct 1.1.1.1"].lower()


async def test_without_allowed_hosts_there_is_no_network(loopback_sites, settings, empty_package):
    site = loopback_sites(b"unreachable")
    settings.TOOLBAY_OUTBOUND_ALLOWED_HOSTS = [f"127.0.0.1:{site.port}"]
    url = f"http://127.0.0.1:{site.port}/page"
    process = await spawn(
        SandboxSpec(package_dir=empty_package, argv=["/usr/bin/python3", "-I", "-c", PROBE, url], env={})
    )
    out, _ = await process.communicate()
    seen = json.loads(out)
    assert seen[url][0] == "error" and "refused" in seen[url][1].lower()  # no proxy, nothing listens
    assert site.hits == []


async def test_mcp_server_fetch_reaches_only_the_allowed_host(
    fetch_server, stdio_session, text_of, loopback_sites, settings, names
):
    allowed = loopback_sites(b"the allowed page says hello")
    other = loopback_sites(b"loopback secret")
    settings.TOOLBAY_OUTBOUND_ALLOWED_HOSTS = [f"127.0.0.1:{allowed.port}"]
    # --allow-private-ips turns off the server's own address check, as a tenant may: the
    # sandbox must hold without the package's cooperation.
    spec = SandboxSpec(
        package_dir=fetch_server,
        argv=["/usr/bin/python3", "-m", "mcp_server_fetch", "--ignore-robots-txt", "--allow-private-ips"],
        env={"PYTHONPATH": str(fetch_server)},
        allow_hosts=(f"127.0.0.1:{allowed.port}", "169.254.169.254", "intranet.test"),
    )
    process = await spawn(spec)
    async with stdio_session(process) as fetch:
        page = await fetch.session.call_tool("fetch", {"url": f"http://127.0.0.1:{allowed.port}/page"})
        assert not page.is_error and "the allowed page says hello" in text_of(page)
        for url in (
            f"http://127.0.0.1:{other.port}/",
            "http://169.254.169.254/latest/meta-data/",
            "http://intranet.test/",
        ):
            result = await fetch.session.call_tool("fetch", {"url": url})
            assert result.is_error, url
            assert "loopback secret" not in text_of(result)
    refusals = "\n".join(egress_of(process).refusals)
    assert f"127.0.0.1:{other.port} is not in this server's allowed hosts" in refusals
    assert "169.254.169.254:80: destination 169.254.169.254 is a cloud metadata address" in refusals
    assert "intranet.test:80: host 'intranet.test' resolves to 10.1.2.3, a private address" in refusals
    assert other.hits == [] and allowed.hits == ["/page"]


RAW = r"""
import json, socket, sys
out = []
for request in json.loads(sys.argv[1]):
    with socket.create_connection(("127.0.0.1", 3128), timeout=10) as s:
        s.sendall(request.encode("latin-1"))
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        out.append(answer.decode("latin-1").split("\r\n", 1)[0])
print(json.dumps(out))
"""


async def test_the_proxy_answers_hostile_requests_without_connecting(loopback_sites, settings, empty_package):
    site = loopback_sites(b"never")
    settings.TOOLBAY_OUTBOUND_ALLOWED_HOSTS = []
    requests = [
        "GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",  # https:// absolute form
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # origin form: not a proxy request
        "CONNECT [::ffff:169.254.169.254]:80 HTTP/1.1\r\n\r\n",  # listed, embeds the metadata address
        f"CONNECT 127.0.0.1:{site.port} HTTP/1.1\r\n\r\n",  # listed, loopback not opened by the operator
        "GET http://user@127.0.0.1:1/ HTTP/1.1\r\n\r\n",  # userinfo tricks: the host is still 127.0.0.1:1
        "CONNECT nonsense HTTP/1.1\r\n\r\n",  # nonsense:443, not listed
        "GARBAGE\r\n\r\n",
        "GET http://example.com/ HTTP/1.1\r\nX: " + "a" * 20000 + "\r\n\r\n",  # head over 16 KiB
    ]
    process = await spawn(
        SandboxSpec(
            package_dir=empty_package,
            argv=["/usr/bin/python3", "-I", "-c", RAW, json.dumps(requests)],
            env={},
            allow_hosts=("[::ffff:169.254.169.254]:80", f"127.0.0.1:{site.port}"),
        )
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    assert json.loads(out) == [
        "HTTP/1.1 400 Bad Request",
        "HTTP/1.1 400 Bad Request",
        "HTTP/1.1 403 Forbidden",
        "HTTP/1.1 403 Forbidden",
        "HTTP/1.1 403 Forbidden",
        "HTTP/1.1 403 Forbidden",
        "HTTP/1.1 400 Bad Request",
        "HTTP/1.1 400 Bad Request",
    ]
    refusals = "\n".join(egress_of(process).refusals)
    assert "embeds 169.254.169.254, a cloud metadata address" in refusals
    assert egress_of(process).connections == 0 and site.hits == []


NODE_FETCH = """
fetch(process.argv[1]).then(async (r) => console.log(JSON.stringify([r.status, await r.text()])))
  .catch((e) => console.log(JSON.stringify(["error", String(e.cause || e)])));
"""


async def test_nodes_fetch_reaches_the_allowed_host_through_the_preload(
    loopback_sites, settings, empty_package, package_cache
):
    """Node 20's built-in fetch ignores HTTP(S)_PROXY; with the undici of the package cache
    preloaded it goes through the sandbox's proxy, to the allowed host only."""
    undici = undici_dir()
    assert undici is not None and (undici / "package.json").exists()
    allowed = loopback_sites(b"hello, Node")
    other = loopback_sites(b"never read")
    settings.TOOLBAY_OUTBOUND_ALLOWED_HOSTS = [f"127.0.0.1:{allowed.port}"]
    node = shutil.which("node")
    assert node is not None

    async def fetched(url: str, *, node_proxy: Path | None) -> list[Any]:
        spec = SandboxSpec(
            package_dir=empty_package,
            argv=[node, "-e", NODE_FETCH, url],
            env={},
            allow_hosts=(f"127.0.0.1:{allowed.port}",),
            node_proxy=node_proxy,
        )
        process = await spawn(spec)
        out, err = await process.communicate()
        assert process.returncode == 0, err.decode()
        return json.loads(out)  # type: ignore[no-any-return]

    assert await fetched(f"http://127.0.0.1:{allowed.port}/page", node_proxy=undici) == [200, "hello, Node"]
    assert allowed.hits == ["/page"]
    refused = await fetched(f"http://127.0.0.1:{other.port}/page", node_proxy=undici)
    assert refused[0] == "error" or refused[0] == 403
    assert other.hits == []
    # Without the preload Node's fetch goes direct, and the sandbox has no route out.
    direct = await fetched(f"http://127.0.0.1:{allowed.port}/again", node_proxy=None)
    assert direct[0] == "error" and "ECONNREFUSED" in direct[1]
    assert allowed.hits == ["/page"]
