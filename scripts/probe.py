"""Answers the questions the make targets ask about services, with exit codes a shell can branch on.

    probe.py redis URL          exit 0: answers PING; 2: nothing listens; 3: answers but refuses us
    probe.py redis-flush URL    empties the db number in URL (only for dbs that belong to a suite)
    probe.py redis-addr URL     prints "host port" (for starting a private redis-server)
    probe.py postgres URL       exit 0: accepts a login to the server in URL; 2: nothing listens; 3: refuses us
    probe.py http URL           exit 0: answers with a status below 500
    probe.py port-free HOST PORT  exit 0: nothing listens on HOST:PORT
    probe.py free-port          prints a TCP port that is free on 127.0.0.1

Runs inside the project's virtualenv (redis and psycopg come from requirements.txt).
"""

from __future__ import annotations

import socket
import sys
import urllib.error
import urllib.request
from urllib.parse import urlsplit

UNREACHABLE = 2
REFUSED = 3
# libpq messages that mean "no server (yet)", as opposed to "a server that says no".
_NOT_LISTENING = (
    "Connection refused",
    "timeout expired",
    "No such file or directory",
    "could not translate host name",
    "Network is unreachable",
    "the database system is starting up",
)


def redis_ping(url: str) -> int:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        # redis-py reports a failed AUTH as AuthenticationError, a ConnectionError subclass.
        if isinstance(exc, redis.AuthenticationError):
            print(f"Redis at {redis_addr(url)} refused us: {exc}", file=sys.stderr)
            return REFUSED
        return UNREACHABLE
    except redis.RedisError as exc:
        print(f"Redis at {redis_addr(url)} answered with an error: {exc}", file=sys.stderr)
        return REFUSED
    finally:
        client.close()
    return 0


def redis_flush(url: str) -> int:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.flushdb()
    finally:
        client.close()
    return 0


def redis_addr(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise SystemExit(f"not a redis:// URL: {url}")
    return f"{parts.hostname or '127.0.0.1'} {parts.port or 6379}"


def postgres_login(url: str) -> int:
    import psycopg

    parts = urlsplit(url)
    # Log in to the maintenance database: the named one may not exist yet (pytest-django creates test_<name>).
    try:
        conn = psycopg.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5432,
            user=parts.username or "postgres",
            password=parts.password or None,
            dbname="postgres",
            connect_timeout=2,
        )
    except psycopg.OperationalError as exc:
        message = str(exc)
        if any(sign in message for sign in _NOT_LISTENING):
            return UNREACHABLE
        print(f"PostgreSQL at {parts.hostname}:{parts.port or 5432} refused us: {message.strip()}", file=sys.stderr)
        return REFUSED
    conn.close()
    return 0


def http_ok(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return 0 if response.status < 500 else 1
    except urllib.error.HTTPError as exc:
        return 0 if exc.code < 500 else 1
    except (urllib.error.URLError, OSError):
        return 1


def port_free(host: str, port: str) -> int:
    with socket.socket() as sock:
        sock.settimeout(1)
        return 1 if sock.connect_ex((host, int(port))) == 0 else 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        print(sock.getsockname()[1])
    return 0


def main(argv: list[str]) -> int:
    commands = {
        "redis": (1, redis_ping),
        "redis-flush": (1, redis_flush),
        "redis-addr": (1, lambda url: print(redis_addr(url)) or 0),
        "postgres": (1, postgres_login),
        "http": (1, http_ok),
        "port-free": (2, port_free),
        "free-port": (0, free_port),
    }
    if len(argv) < 1 or argv[0] not in commands or len(argv) - 1 != commands[argv[0]][0]:
        print(__doc__, file=sys.stderr)
        return 64
    return commands[argv[0]][1](*argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
