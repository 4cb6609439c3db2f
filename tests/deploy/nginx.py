"""deploy/nginx.conf made runnable here: the test's own ports, a throw-away certificate, the
upstream servers the test runs, and every path nginx writes under one directory."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.certificates import throwaway_certificate
from tests.deploy.deployment import ROOT

NGINX_CONF = ROOT / "deploy" / "nginx.conf"


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)


def write_config(directory: Path, *, listen_port: int, upstream_ports: list[int], static_root: Path) -> Path:
    """nginx.conf for ``nginx -c``: deploy/nginx.conf inside an http block, substituted. Its
    access log names the upstream each request went to (the test reads it)."""
    cert, key = throwaway_certificate(directory, "toolbay.example.com", also=("localhost",))
    site = NGINX_CONF.read_text()
    site = site.replace("listen 443 ssl;", f"listen 127.0.0.1:{listen_port} ssl;")
    site = site.replace("/etc/ssl/certs/toolbay.example.com.pem", str(cert))
    site = site.replace("/etc/ssl/private/toolbay.example.com.key", str(key))
    site = site.replace("alias /app/staticfiles/;", f"alias {static_root}/;")
    servers = re.findall(r"^\s*#?\s*server 127\.0\.0\.1:800\d[^;]*;\n", site, flags=re.M)
    assert servers, "deploy/nginx.conf names no upstream server 127.0.0.1:800x"
    options = re.search(r"server 127\.0\.0\.1:800\d([^;]*);", servers[0])
    assert options is not None
    lines = "".join(f"    server 127.0.0.1:{port}{options.group(1)};\n" for port in upstream_ports)
    site = site.replace("".join(servers), lines, 1)
    for server in servers[1:]:
        site = site.replace(server, "")
    (directory / "toolbay-site.conf").write_text(site)
    conf = directory / "nginx.conf"
    conf.write_text(
        f"""daemon off;
worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {directory}/body;
    proxy_temp_path {directory}/proxy;
    fastcgi_temp_path {directory}/fastcgi;
    uwsgi_temp_path {directory}/uwsgi;
    scgi_temp_path {directory}/scgi;
    log_format upstream '$status $http_mcp_session_id $request_method $uri $upstream_status $upstream_addr';
    access_log {directory}/access.log upstream;
    include {directory}/toolbay-site.conf;
}}
"""
    )
    return conf
