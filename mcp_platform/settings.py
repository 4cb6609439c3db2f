"""Toolbay settings, read from the environment (every variable is listed in README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import dj_database_url
import django_stubs_ext
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from mcp_platform.env import env_bool, env_float, env_int, env_ints, env_list, env_str

# Generic Django classes (ModelForm[Tool], ModelAdmin[Tool]) are subscriptable at run time.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", True)

_DEV_SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. With DEBUG=0 Toolbay refuses to start without one: "
            "export SECRET_KEY to a long random string (for example the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`)."
        )
    SECRET_KEY = _DEV_SECRET_KEY

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
# Origins a browser-based MCP client may call from. Requests without Origin (every
# non-browser client) are allowed; see mcp_platform/mcp/http.py.
MCP_ALLOWED_ORIGINS = env_list("MCP_ALLOWED_ORIGINS", [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc assets served from here: the docs work offline
    "channels",
    "tenants",
    "tools_app",
    "audit",
    "oauth",
    "api",
    "console",
    "staff_auth",
]

MIDDLEWARE = [
    "mcp_platform.logs.RequestIdMiddleware",
    "mcp_platform.faults.UnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "audit.middleware.AuditActorMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "mcp_platform.framing.FrameAncestorsMiddleware",
]

ROOT_URLCONF = "mcp_platform.urls"
ASGI_APPLICATION = "mcp_platform.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "staff_auth.context.sso",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
        # A reused connection is tested before its first query (after a database restart,
        # a request or a task gets a fresh one instead of an error).
        conn_health_checks=True,
    )
}
# Behind PgBouncer in transaction mode each transaction may get another server connection, so
# nothing may outlive one: no server-side cursors (QuerySet.iterator() holds one open across
# fetches). Django's psycopg backend prepares no statements already (prepare_threshold=None).
if env_bool("DATABASE_PGBOUNCER", False):
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # The socket timeout must exceed the layer's 5 s blocking reads (see redis_clients.py).
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
            "prefix": env_str("CHANNEL_LAYER_PREFIX", "toolbay:asgi"),
            # Streams buffer a few hundred events while a slow client drains them.
            "capacity": 1000,
            "expiry": 60,
        },
    }
}

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
# A call is acknowledged only once it finished, and goes back to the queue when the worker
# process running it dies; tools_app.tasks decides whether the redelivery may run again.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery would close the database connection around every task; mcp_platform/celery.py applies
# Django's CONN_MAX_AGE rule instead, and this only recycles it after so many tasks.
CELERY_DB_REUSE_MAX = 1000
CELERY_TASK_DEFAULT_QUEUE = "toolbay.short"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Unacknowledged messages of a worker that vanished entirely come back after this long;
# it must exceed the longest tool timeout or long calls would be delivered twice.
# Lets two deployments (or a test's own servers and workers) share one Redis as broker.
CELERY_BROKER_KEY_PREFIX = env_str("CELERY_BROKER_KEY_PREFIX", "")
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 7200, minimum=60),
    "global_keyprefix": CELERY_BROKER_KEY_PREFIX,
}
CELERY_BEAT_SCHEDULE = {
    "purge-expired-runs": {"task": "tools_app.tasks.purge_expired_runs", "schedule": 60.0},
    "reap-stuck-runs": {"task": "tools_app.tasks.reap_stuck_runs", "schedule": 30.0},
    # Runs whose worker stopped beating (a task has no stream whose follower would notice).
    "recover-lost-runs": {"task": "tools_app.tasks.recover_lost_runs", "schedule": 5.0},
    "purge-old-invocations": {"task": "audit.tasks.purge_old_invocations", "schedule": 3600.0},
}

REST_FRAMEWORK = {
    # Scripts send a personal access token; browsers use their admin session (with CSRF).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.authentication.AccessTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "api.pagination.IdCursorPagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.exceptions.exception_handler",
    # JSON strictly (no lone surrogates, no NaN: api/parsers.py); forms for the browsable admin.
    "DEFAULT_PARSER_CLASSES": [
        "api.parsers.StrictJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Toolbay API",
    "DESCRIPTION": "Manage tenants, memberships, MCP API keys, tools and access rules. "
    "Authenticate with a personal access token (`Authorization: Bearer tbp_…`) or a browser session.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v[0-9]+",
    # Separate request and response components, so read-only fields are not asked for.
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {"RoleEnum": "tenants.models.Membership.Role"},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.schema.add_error_responses",
    ],
}
# Test calls through the REST API run in the web process, so they get at most this long.
TOOLBAY_TEST_CALL_TIMEOUT_SECONDS = env_float("TOOLBAY_TEST_CALL_TIMEOUT_SECONDS", 30.0, minimum=0.1)

# --- The edge: slow clients, outages, shared pools -----------------------------------
# A request whose body has not fully arrived this long after its headers is answered 408
# and its connection closed (a client sending a byte a second holds nothing for long).
TOOLBAY_BODY_READ_TIMEOUT_SECONDS = env_float("TOOLBAY_BODY_READ_TIMEOUT_SECONDS", 30.0, minimum=0.1)
# Requests one client address may have open at once in one process (429 past it); 0: no
# cap. Behind a reverse proxy, uvicorn's --proxy-headers makes it the client's address.
TOOLBAY_MAX_CONNECTIONS_PER_CLIENT = env_int("TOOLBAY_MAX_CONNECTIONS_PER_CLIENT", 256, minimum=0)
# The garbage collector's thresholds in server processes (gc.set_threshold; Python's own are
# 700,10,10): full passes scan every live object, and thousands of sessions are many objects.
TOOLBAY_GC_THRESHOLDS = env_ints("TOOLBAY_GC_THRESHOLDS", (50_000, 50, 100), minimum=1)
# Retry-After of the 503 answered while Redis or the database does not answer.
TOOLBAY_RETRY_AFTER_SECONDS = env_int("TOOLBAY_RETRY_AFTER_SECONDS", 2, minimum=1)
# redis-py pools (per process, per event loop): connections at most, and how long a request
# waits for a free one before it is a 503.
REDIS_MAX_CONNECTIONS = env_int("REDIS_MAX_CONNECTIONS", 200, minimum=2)
REDIS_POOL_TIMEOUT_SECONDS = env_float("REDIS_POOL_TIMEOUT_SECONDS", 5.0, minimum=0.1)

# --- MCP endpoint -------------------------------------------------------------------
# Idle time after which an MCP session is forgotten (sliding; every request renews it). The
# floor refuses only values under which a session could lapse between a client's initialize
# and its next message (Redis expires keys in whole seconds); a sensible value above it is the
# operator's choice.
MCP_SESSION_IDLE_SECONDS = env_int("MCP_SESSION_IDLE_SECONDS", 3600, minimum=2)
# How long SSE events stay in Redis for clients that resume with Last-Event-ID.
MCP_EVENT_TTL_SECONDS = env_int("MCP_EVENT_TTL_SECONDS", 600, minimum=10)
# Largest accepted JSON-RPC request body.
MCP_MAX_BODY_BYTES = env_int("MCP_MAX_BODY_BYTES", 4 * 1024 * 1024, minimum=1024)
# Input hygiene, checked before any work (400 with -32600): nesting depth of the JSON,
# longest string or key, messages per batch (2025-03-26 sessions).
MCP_MAX_JSON_DEPTH = env_int("MCP_MAX_JSON_DEPTH", 64, minimum=4)
MCP_MAX_STRING_CHARS = env_int("MCP_MAX_STRING_CHARS", 1024 * 1024, minimum=256)
MCP_MAX_BATCH_REQUESTS = env_int("MCP_MAX_BATCH_REQUESTS", 100, minimum=1)
# Fair shares of a process: requests of one batch running at once, and requests (a batch
# counts once) one session may have running in one process (429 past it).
MCP_BATCH_CONCURRENCY = env_int("MCP_BATCH_CONCURRENCY", 8, minimum=1)
MCP_SESSION_MAX_IN_FLIGHT = env_int("MCP_SESSION_MAX_IN_FLIGHT", 32, minimum=1)
# Page size of tools/list.
MCP_PAGE_SIZE = env_int("MCP_PAGE_SIZE", 100, minimum=1)
# Upper bound on how long a handler waits for the client to answer elicitation/sampling.
MCP_CLIENT_REQUEST_TIMEOUT_SECONDS = env_float("MCP_CLIENT_REQUEST_TIMEOUT_SECONDS", 300.0, minimum=1.0)
# How long a cancelled handler may take to stop before it is interrupted.
MCP_CANCEL_GRACE_SECONDS = env_float("MCP_CANCEL_GRACE_SECONDS", 2.0, minimum=0.0)
# Comment lines keep idle SSE streams open through proxies.
MCP_SSE_KEEPALIVE_SECONDS = env_float("MCP_SSE_KEEPALIVE_SECONDS", 15.0, minimum=0.1)
# Trust X-Forwarded-Host only when a reverse proxy in front sets it.
MCP_TRUST_FORWARDED_HOST = env_bool("MCP_TRUST_FORWARDED_HOST", False)
# 2026-07-28: how long clients may keep lists (ttlMs); listen streams announce changes sooner.
MCP_CACHE_TTL_MS = env_int("MCP_CACHE_TTL_MS", 10_000, minimum=0)
# 2026-07-28: how long a multi-round requestState stays good (the client's time to answer).
MCP_REQUEST_STATE_TTL_SECONDS = env_int("MCP_REQUEST_STATE_TTL_SECONDS", 900, minimum=10)

# --- Background calls and MCP tasks (Celery) ---------------------------------------
# Tools whose timeout is longer than this run on the "toolbay.long" queue, so long calls
# cannot starve short ones on "toolbay.short".
TOOLBAY_LONG_CALL_SECONDS = env_float("TOOLBAY_LONG_CALL_SECONDS", 30.0, minimum=0.0)
# Retries of transient backend failures, for tools marked idempotent only.
TOOLBAY_MAX_RETRIES = env_int("TOOLBAY_MAX_RETRIES", 3, minimum=0)
TOOLBAY_RETRY_BACKOFF_SECONDS = env_float("TOOLBAY_RETRY_BACKOFF_SECONDS", 0.5, minimum=0.0)
# How long a background call may wait for a free worker before it is failed.
TOOLBAY_QUEUE_TIMEOUT_SECONDS = env_float("TOOLBAY_QUEUE_TIMEOUT_SECONDS", 300.0, minimum=1.0)
# Servers and workers beat in Redis this often; a producer silent for three beats is dead,
# and whoever follows its streams (or runs) ends them (mcp_platform/mcp/liveness.py).
TOOLBAY_HEARTBEAT_SECONDS = env_float("TOOLBAY_HEARTBEAT_SECONDS", 2.0, minimum=0.1)
# A run whose worker lives on this long past its timeout and cancel grace is ended by the web
# side as timed out (tools_app/runs/recovery.py): the worker's own timeout handling comes first.
TOOLBAY_RUN_DEADLINE_SLACK_SECONDS = env_float("TOOLBAY_RUN_DEADLINE_SLACK_SECONDS", 5.0, minimum=1.0)
# MCP tasks: default and largest time-to-live, and the poll interval suggested to clients.
MCP_TASK_DEFAULT_TTL_MS = env_int("MCP_TASK_DEFAULT_TTL_MS", 3_600_000, minimum=1000)
MCP_TASK_MAX_TTL_MS = env_int("MCP_TASK_MAX_TTL_MS", 86_400_000, minimum=1000)
MCP_TASK_POLL_INTERVAL_MS = env_int("MCP_TASK_POLL_INTERVAL_MS", 1000, minimum=100)
# Extra modules whose @tool_handler functions should be registered (comma-separated).
TOOLBAY_HANDLER_MODULES = env_list("TOOLBAY_HANDLER_MODULES", [])

# --- Tool backends (HTTP, upstream MCP) ---------------------------------------------
# Fernet keys that encrypt backend secrets at rest, comma-separated: the first encrypts,
# all decrypt (rotation: prepend a new key, run `manage.py rotate_backend_secrets`, drop
# the old one). Required with DEBUG=0, like SECRET_KEY.
_DEV_SECRET_KEYS = ["dG9vbGJheS1kZXYtb25seS1iYWNrZW5kLXNlY3JldHM="]  # base64 of 32 fixed bytes
TOOLBAY_SECRET_KEYS = env_list("TOOLBAY_SECRET_KEYS", [])
if not TOOLBAY_SECRET_KEYS:
    if not DEBUG:
        raise ImproperlyConfigured(
            "TOOLBAY_SECRET_KEYS is not set. With DEBUG=0 Toolbay refuses to start without it: export "
            "TOOLBAY_SECRET_KEYS to a Fernet key (for example the output of `python -c 'from "
            "cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`)."
        )
    TOOLBAY_SECRET_KEYS = _DEV_SECRET_KEYS
for _position, _key in enumerate(TOOLBAY_SECRET_KEYS, start=1):
    try:
        Fernet(_key)
    except ValueError:
        raise ImproperlyConfigured(
            f"TOOLBAY_SECRET_KEYS entry #{_position} is not a Fernet key (32 url-safe base64-encoded bytes)"
        ) from None
# Outbound destinations exempt from the SSRF block (loopback, private, link-local, ...):
# host names, host:port, IP addresses or CIDR networks, comma-separated.
TOOLBAY_OUTBOUND_ALLOWED_HOSTS = env_list("TOOLBAY_OUTBOUND_ALLOWED_HOSTS", [])
# Largest response body an HTTP tool or an upstream MCP server may send (decoded bytes).
TOOLBAY_HTTP_MAX_RESPONSE_BYTES = env_int("TOOLBAY_HTTP_MAX_RESPONSE_BYTES", 5 * 1024 * 1024, minimum=1024)
# Largest OpenAPI document an import reads (GitHub's full description is 13 MB).
TOOLBAY_OPENAPI_MAX_DOCUMENT_BYTES = env_int("TOOLBAY_OPENAPI_MAX_DOCUMENT_BYTES", 32 * 1024 * 1024, minimum=1024)
# Redirects an HTTP tool follows at most (each one is checked like the first request).
TOOLBAY_HTTP_MAX_REDIRECTS = env_int("TOOLBAY_HTTP_MAX_REDIRECTS", 5, minimum=0)
# Connections the outbound HTTP pool keeps per process.
TOOLBAY_HTTP_MAX_CONNECTIONS = env_int("TOOLBAY_HTTP_MAX_CONNECTIONS", 100, minimum=1)
# Upstream MCP servers: timeout of handshakes and tools/list, and the interval of the
# periodic re-import by `manage.py listen_upstreams` (0: only on list_changed and by hand).
TOOLBAY_UPSTREAM_TIMEOUT_SECONDS = env_float("TOOLBAY_UPSTREAM_TIMEOUT_SECONDS", 30.0, minimum=0.1)
TOOLBAY_UPSTREAM_REFRESH_SECONDS = env_float("TOOLBAY_UPSTREAM_REFRESH_SECONDS", 300.0, minimum=0.0)
# Packaged MCP servers (npm/PyPI stdio servers run by `manage.py run_packaged`): where installs
# are cached (content-addressed, one per version per machine), the runner's HTTP bridge (bind
# address, port (0: any free one), the address other processes reach it at), and how instances
# live: stopped after this many idle seconds, a call waits this long for a cold start.
TOOLBAY_PACKAGE_CACHE = env_str("TOOLBAY_PACKAGE_CACHE", str(BASE_DIR / "var" / "packages"))
TOOLBAY_PACKAGED_PYTHON = env_str("TOOLBAY_PACKAGED_PYTHON", "")
TOOLBAY_RUNNER_HOST = env_str("TOOLBAY_RUNNER_HOST", "127.0.0.1")
TOOLBAY_RUNNER_PORT = env_int("TOOLBAY_RUNNER_PORT", 0, minimum=0)
TOOLBAY_RUNNER_ADVERTISE = env_str("TOOLBAY_RUNNER_ADVERTISE", "")
TOOLBAY_PACKAGED_IDLE_SECONDS = env_float("TOOLBAY_PACKAGED_IDLE_SECONDS", 600.0, minimum=1.0)
TOOLBAY_PACKAGED_START_SECONDS = env_float("TOOLBAY_PACKAGED_START_SECONDS", 60.0, minimum=1.0)
TOOLBAY_PACKAGED_MAX_INSTANCES = env_int("TOOLBAY_PACKAGED_MAX_INSTANCES", 200, minimum=1)
# Each instance's limits (rlimits in its sandbox, also applied where it runs unsandboxed): memory
# per process (RLIMIT_DATA), CPU seconds per process (a warm instance that reaches it is
# restarted), processes and threads of the instance together (Node needs about 11), open files.
TOOLBAY_PACKAGED_MEMORY_BYTES = env_int("TOOLBAY_PACKAGED_MEMORY_BYTES", 512 * 1024 * 1024, minimum=16 * 1024 * 1024)
TOOLBAY_PACKAGED_CPU_SECONDS = env_int("TOOLBAY_PACKAGED_CPU_SECONDS", 300, minimum=1)
TOOLBAY_PACKAGED_MAX_PROCESSES = env_int("TOOLBAY_PACKAGED_MAX_PROCESSES", 64, minimum=4)
TOOLBAY_PACKAGED_OPEN_FILES = env_int("TOOLBAY_PACKAGED_OPEN_FILES", 256, minimum=16)
# Resources: the largest static content stored in the database (text or binary), and how
# much static content each process keeps in memory to serve resources/read without a query.
TOOLBAY_RESOURCE_MAX_BYTES = env_int("TOOLBAY_RESOURCE_MAX_BYTES", 1024 * 1024, minimum=1)
TOOLBAY_RESOURCE_CACHE_BYTES = env_int("TOOLBAY_RESOURCE_CACHE_BYTES", 64 * 1024 * 1024, minimum=0)
# Tenants' catalogs each process keeps in memory (estimated bytes; least recently used tenant
# out first): about 2,000 tenants of 20 private tools each (see the README's figures).
TOOLBAY_CATALOG_CACHE_BYTES = env_int("TOOLBAY_CATALOG_CACHE_BYTES", 64 * 1024 * 1024, minimum=0)

# --- Packaged MCP servers: the sandbox (tools_app/backends/packaged/sandbox.py) --------
# The bubblewrap binary (a name on PATH or a path). Missing or not working (no unprivileged
# user namespaces): no sandbox, and untrusted packages are refused unless opted out below.
TOOLBAY_SANDBOX_BWRAP = env_str("TOOLBAY_SANDBOX_BWRAP", "bwrap")
# Run untrusted packages without a sandbox where none is available (said at start-up and in
# /readyz). Off by default: a package from a registry is code nobody here reviewed.
TOOLBAY_SANDBOX_OPTOUT = env_bool("TOOLBAY_SANDBOX_OPTOUT", False)
# When the runner runs as root, sandboxes run as this unprivileged uid/gid (as root the
# sandboxed process would own every root-owned file and escape RLIMIT_NPROC).
TOOLBAY_SANDBOX_UID = env_int("TOOLBAY_SANDBOX_UID", 65534, minimum=1)
TOOLBAY_SANDBOX_GID = env_int("TOOLBAY_SANDBOX_GID", 65534, minimum=1)

# --- Audit -------------------------------------------------------------------------
# Record one Invocation row per tools/call (turned off only to measure what it costs).
AUDIT_INVOCATIONS = env_bool("AUDIT_INVOCATIONS", True)
# Invocations older than this many days are purged by a periodic task (0 keeps them forever).
AUDIT_RETENTION_DAYS = env_int("AUDIT_RETENTION_DAYS", 90, minimum=0)
# Rows the audit journal (a Redis stream) may hold before processes drop new ones: the backlog
# while no audit writer runs. About 0.5 KB of Redis memory per row.
AUDIT_JOURNAL_MAX_ROWS = env_int("AUDIT_JOURNAL_MAX_ROWS", 500_000, minimum=1)
# Rows the audit writer inserts per batch at most.
AUDIT_WRITER_BATCH_ROWS = env_int("AUDIT_WRITER_BATCH_ROWS", 1000, minimum=1)
# After a partial batch the writer waits this long for more rows: fewer, larger transactions
# under load, at the price of rows reaching the database (not the journal) this much later.
AUDIT_WRITER_LINGER_MS = env_int("AUDIT_WRITER_LINGER_MS", 200, minimum=0)
# A row a writer took but did not acknowledge for this long (the writer died) is taken over
# by another writer, or by its replacement.
AUDIT_WRITER_CLAIM_IDLE_SECONDS = env_float("AUDIT_WRITER_CLAIM_IDLE_SECONDS", 30.0, minimum=0.1)

# --- OAuth (resource server per tenant, embedded authorization server) -------------------
# Scheme and authority clients use to reach Toolbay (https://toolbay.example.com): MCP URLs,
# token audiences and issuers are built from it. Empty: from each request's Host (and, with
# MCP_TRUST_FORWARDED_HOST, X-Forwarded-Host/-Proto), which is right for `make run`.
TOOLBAY_PUBLIC_URL = env_str("TOOLBAY_PUBLIC_URL", "").strip().rstrip("/")
if TOOLBAY_PUBLIC_URL and not TOOLBAY_PUBLIC_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"TOOLBAY_PUBLIC_URL must start with http:// or https://, got {TOOLBAY_PUBLIC_URL!r}")
# Lifetimes of what the embedded authorization server issues.
TOOLBAY_OAUTH_ACCESS_TOKEN_SECONDS = env_int("TOOLBAY_OAUTH_ACCESS_TOKEN_SECONDS", 3600, minimum=30)
TOOLBAY_OAUTH_REFRESH_TOKEN_DAYS = env_int("TOOLBAY_OAUTH_REFRESH_TOKEN_DAYS", 30, minimum=1)
TOOLBAY_OAUTH_CODE_SECONDS = env_int("TOOLBAY_OAUTH_CODE_SECONDS", 300, minimum=10)
# External issuers: how long their JWKS and metadata are kept, the least time between two
# fetches caused by unknown key ids, how long an introspection answer is reused, the timeout
# of those requests.
TOOLBAY_OAUTH_JWKS_CACHE_SECONDS = env_int("TOOLBAY_OAUTH_JWKS_CACHE_SECONDS", 3600, minimum=1)
TOOLBAY_OAUTH_JWKS_REFRESH_SECONDS = env_float("TOOLBAY_OAUTH_JWKS_REFRESH_SECONDS", 30.0, minimum=0.0)
TOOLBAY_OAUTH_INTROSPECTION_CACHE_SECONDS = env_int("TOOLBAY_OAUTH_INTROSPECTION_CACHE_SECONDS", 60, minimum=0)
TOOLBAY_OAUTH_FETCH_TIMEOUT_SECONDS = env_float("TOOLBAY_OAUTH_FETCH_TIMEOUT_SECONDS", 5.0, minimum=0.1)
# Leeway for the exp/nbf/iat of tokens (clock skew between issuer and Toolbay).
TOOLBAY_OAUTH_CLOCK_SKEW_SECONDS = env_int("TOOLBAY_OAUTH_CLOCK_SKEW_SECONDS", 10, minimum=0)
# Client ID metadata documents are read again after this long.
TOOLBAY_OAUTH_CIMD_CACHE_SECONDS = env_int("TOOLBAY_OAUTH_CIMD_CACHE_SECONDS", 3600, minimum=0)
# Dynamic client registration limits: registrations per client address and tenant per hour,
# and clients per tenant.
TOOLBAY_OAUTH_REGISTRATIONS_PER_HOUR = env_int("TOOLBAY_OAUTH_REGISTRATIONS_PER_HOUR", 30, minimum=1)
TOOLBAY_OAUTH_MAX_CLIENTS_PER_TENANT = env_int("TOOLBAY_OAUTH_MAX_CLIENTS_PER_TENANT", 1000, minimum=1)
# The tenant whose Protected Resource Metadata the root location
# (/.well-known/oauth-protected-resource) serves; empty: it answers 404.
TOOLBAY_OAUTH_ROOT_TENANT = env_str("TOOLBAY_OAUTH_ROOT_TENANT", "").strip()

# --- Per-user connections (oauth/connections): each user's grant at an outside provider ---
# A connect link a tool call hands out works once, for this long.
TOOLBAY_CONNECT_LINK_SECONDS = env_int("TOOLBAY_CONNECT_LINK_SECONDS", 600, minimum=30)
# An access token this close to its expiry is refreshed before a call uses it.
TOOLBAY_CONNECTION_REFRESH_MARGIN_SECONDS = env_int("TOOLBAY_CONNECTION_REFRESH_MARGIN_SECONDS", 60, minimum=0)

# --- Staff sign-in (admin, console, OAuth sign-in page): throttling and single sign-on ---
# Password sign-in goes through the throttle (staff_auth/throttle.py); after sign-in without
# `next`, /staff/ sends each user to the admin, the console or their authorizations.
AUTHENTICATION_BACKENDS = ["staff_auth.backends.ThrottledPasswordBackend"]
LOGIN_REDIRECT_URL = "staff_auth:landing"
# Failed password sign-ins that lock out a client address, and an account (from any address),
# for the cool-off (counted from the last failure).
TOOLBAY_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int("TOOLBAY_LOGIN_MAX_FAILURES_PER_ADDRESS", 10, minimum=1)
TOOLBAY_LOGIN_MAX_FAILURES_PER_ACCOUNT = env_int("TOOLBAY_LOGIN_MAX_FAILURES_PER_ACCOUNT", 50, minimum=1)
TOOLBAY_LOGIN_COOLOFF_SECONDS = env_int("TOOLBAY_LOGIN_COOLOFF_SECONDS", 900, minimum=1)
# Staff SSO through an OpenID Connect provider; off while the issuer or client id is empty.
TOOLBAY_SSO_ISSUER = env_str("TOOLBAY_SSO_ISSUER", "").strip()
if TOOLBAY_SSO_ISSUER and not DEBUG and not TOOLBAY_SSO_ISSUER.startswith("https://"):
    raise ImproperlyConfigured(f"TOOLBAY_SSO_ISSUER must be an https:// URL with DEBUG=0, got {TOOLBAY_SSO_ISSUER!r}")
TOOLBAY_SSO_CLIENT_ID = env_str("TOOLBAY_SSO_CLIENT_ID", "").strip()
TOOLBAY_SSO_CLIENT_SECRET = env_str("TOOLBAY_SSO_CLIENT_SECRET", "")
TOOLBAY_SSO_SCOPES = env_str("TOOLBAY_SSO_SCOPES", "openid email profile groups")
TOOLBAY_SSO_GROUPS_CLAIM = env_str("TOOLBAY_SSO_GROUPS_CLAIM", "groups")
try:
    TOOLBAY_SSO_ROLE_MAP = json.loads(env_str("TOOLBAY_SSO_ROLE_MAP", "{}"))
except ValueError as _error:
    raise ImproperlyConfigured(f"TOOLBAY_SSO_ROLE_MAP is not JSON: {_error}") from None
TOOLBAY_SSO_LINK_BY_EMAIL = env_bool("TOOLBAY_SSO_LINK_BY_EMAIL", True)
TOOLBAY_SSO_CREATE_USERS = env_bool("TOOLBAY_SSO_CREATE_USERS", True)
# 0: password sign-in is refused to everyone but the break-glass account.
TOOLBAY_SSO_PASSWORD_LOGIN = env_bool("TOOLBAY_SSO_PASSWORD_LOGIN", True)
TOOLBAY_SSO_BREAK_GLASS_USERNAME = env_str("TOOLBAY_SSO_BREAK_GLASS_USERNAME", "").strip()

# /metrics answers only with "Authorization: Bearer <METRICS_TOKEN>" when set; empty: open with
# DEBUG=1, 403 to everyone with DEBUG=0.
METRICS_TOKEN = env_str("METRICS_TOKEN", "")

# "plain" text lines or "json" (one object per line, with request/session/call ids).
LOG_FORMAT = env_str("LOG_FORMAT", "plain").strip().lower()
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be plain or json, got {LOG_FORMAT!r}")
LOG_LEVEL = env_str("LOG_LEVEL", "INFO")
# uvicorn's access log: one line per HTTP request. On by default while DEBUG=1; in production it
# costs a log record per MCP call, so it is off unless asked for (the reverse proxy logs requests).
ACCESS_LOG = env_bool("ACCESS_LOG", DEBUG)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "mcp_platform.logs.LogContextFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "mcp_platform.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["context"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # In JSON mode uvicorn's server messages are JSON too. Its access log ("uvicorn.access") keeps
    # uvicorn's plain format; ACCESS_LOG=0 silences it (as --no-access-log does).
    "loggers": {
        **(
            {"uvicorn.error": {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False}}
            if LOG_FORMAT == "json"
            else {}
        ),
        **({} if ACCESS_LOG else {"uvicorn.access": {"handlers": [], "level": "CRITICAL", "propagate": False}}),
    },
}
# Celery workers keep these handlers instead of installing their own (which are plain text).
CELERY_WORKER_HIJACK_ROOT_LOGGER = LOG_FORMAT != "json"

# OpenTelemetry tracing: only the standard OTEL_* variables configure it, off when unset
# (mcp_platform.tracing). Installed here because every process (web, worker, audit writer)
# loads the settings, and before Celery's pool forks.
try:
    from mcp_platform import tracing as _tracing
except ValueError as _error:
    raise ImproperlyConfigured(str(_error)) from None
_tracing.configure()
# The console links an invocation's trace id to the tracing UI: "{trace_id}" is replaced.
TOOLBAY_TRACE_URL = env_str("TOOLBAY_TRACE_URL", "").strip()
if TOOLBAY_TRACE_URL and "{trace_id}" not in TOOLBAY_TRACE_URL:
    raise ImproperlyConfigured(f"TOOLBAY_TRACE_URL must contain {{trace_id}}, got {TOOLBAY_TRACE_URL!r}")
