# shellcheck shell=bash
# Shared by scripts/run.sh, scripts/test.sh and conformance/run.sh; source it, don't run it.
#
# What it gives them: a virtualenv that matches the requirements files, Redis and
# PostgreSQL that answer (started or installed when they are local and missing), and
# background children that one trap stops together.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
VAR="$ROOT/var"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
warn() { printf '\033[33mwarning:\033[0m %s\n' "$*" >&2; }
die() {
    printf '\033[31merror:\033[0m %s\n' "$1" >&2
    shift
    local line
    for line in "$@"; do printf '       %s\n' "$line" >&2; done
    exit 1
}

# A URL fit for a message: the password, if any, replaced by ***.
redact() { sed -E 's#(//[^:/@]*):[^@/]*@#\1:***@#' <<<"$1"; }

# True when nobody can answer a prompt (CI, or stdin is not a terminal).
non_interactive() { [[ -n "${CI:-}" || ! -t 0 ]]; }

# Runs a command as root: directly, or through sudo (never prompting when non-interactive).
as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null; then
        if non_interactive; then sudo -n "$@"; else sudo "$@"; fi
    else
        return 127
    fi
}

# --- Python and the virtualenv ---------------------------------------------------------

find_python() {
    local candidate
    for candidate in ${PYTHON:-} python3.11 python3.12 python3.13 python3; do
        if command -v "$candidate" >/dev/null &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

ensure_venv() {
    if [[ -x "$PY" ]] && "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        return 0
    fi
    if [[ -e "$VENV" ]]; then
        warn "$VENV does not hold a working Python 3.11+; creating it again (it only holds installed packages)."
        rm -rf "$VENV"
    fi
    local python
    python="$(find_python)" || die "Python 3.11 or newer is needed and none was found on PATH." \
        "Install it (Debian/Ubuntu: apt-get install python3.11 python3.11-venv), or point PYTHON at one: make run PYTHON=/path/to/python3.11"
    say "Creating the virtualenv .venv with $python ($("$python" --version 2>&1))"
    "$python" -m venv "$VENV" || die "could not create $VENV." \
        "On Debian/Ubuntu the venv module is a separate package: apt-get install python3.11-venv"
}

# ensure_requirements runtime|dev — pip install only when the requirements files changed
# since the last successful install (a content hash kept inside .venv).
ensure_requirements() {
    local kind="$1" file stamp wanted
    ensure_venv
    case "$kind" in
        runtime) file="requirements.txt" ;;
        dev) file="requirements-dev.txt" ;;
        *) die "ensure_requirements: unknown kind $kind" ;;
    esac
    stamp="$VENV/.toolbay-$kind.sha256"
    wanted="$(requirements_hash "$kind")"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
        return 0
    fi
    say "Installing $file into .venv (new, or changed since the last install)"
    "$PY" -m pip install --quiet --disable-pip-version-check -r "$ROOT/$file" ||
        die "pip install -r $file failed (see above)."
    if [[ "$kind" == dev ]]; then
        # httpbin (the OpenAPI import's end-to-end test) pins greenlet<3 on Python 3.11, which it
        # never imports; its real dependencies are in requirements-dev.txt.
        "$PY" -m pip install --quiet --disable-pip-version-check --no-deps httpbin==0.10.4 ||
            die "pip install httpbin failed (see above)."
    fi
    printf '%s\n' "$wanted" >"$stamp"
    # requirements-dev.txt includes requirements.txt, so the runtime set is installed too.
    if [[ "$kind" == dev ]]; then
        requirements_hash runtime >"$VENV/.toolbay-runtime.sha256"
    fi
}

requirements_hash() {
    local files=("$ROOT/requirements.txt")
    [[ "$1" == dev ]] && files+=("$ROOT/requirements-dev.txt")
    "$PY" - "${files[@]}" <<'EOF'
import hashlib, sys
digest = hashlib.sha256()
for name in sys.argv[1:]:
    with open(name, "rb") as fh:
        digest.update(fh.read())
print(digest.hexdigest())
EOF
}

probe() { "$PY" "$ROOT/scripts/probe.py" "$@"; }

# --- Background children ---------------------------------------------------------------
# Each child gets its own process group (set -m), so stopping it also stops whatever it
# forked (Celery's pool, uvicorn workers), and a Ctrl-C reaches only this script, which
# then shuts the children down in order.

CHILD_PIDS=()
CHILD_NAMES=()

# start_child NAME LOGFILE|- COMMAND... — sets CHILD_PID. Each child runs in its own process
# group (stop_children signals the whole group, pool children included) and, where util-linux's
# setpriv is available, gets SIGTERM from the kernel if this script dies without stopping it
# (killed with SIGKILL): no child outlives the script.
start_child() {
    local name="$1" log="$2"
    shift 2
    if command -v setpriv >/dev/null && setpriv --pdeathsig TERM true 2>/dev/null; then
        set -- setpriv --pdeathsig TERM "$@"
    fi
    set -m
    if [[ "$log" == - ]]; then
        "$@" </dev/null &
    else
        "$@" </dev/null >>"$log" 2>&1 &
    fi
    CHILD_PID=$!
    set +m
    CHILD_PIDS+=("$CHILD_PID")
    CHILD_NAMES+=("$name")
}

child_alive() { kill -0 "$1" 2>/dev/null; }

# Stops every child (newest first): SIGTERM to its process group, SIGKILL after a grace period.
stop_children() {
    local grace="${1:-15}" i pid deadline
    ((${#CHILD_PIDS[@]})) || return 0
    for ((i = ${#CHILD_PIDS[@]} - 1; i >= 0; i--)); do
        pid="${CHILD_PIDS[$i]}"
        if child_alive "$pid"; then
            say "Stopping ${CHILD_NAMES[$i]} (pid $pid)"
            kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        fi
    done
    deadline=$((SECONDS + grace))
    for pid in "${CHILD_PIDS[@]}"; do
        while child_alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
    done
    for ((i = 0; i < ${#CHILD_PIDS[@]}; i++)); do
        pid="${CHILD_PIDS[$i]}"
        # The group may outlive its leader (a pool child), so always sweep it.
        if child_alive "$pid"; then warn "${CHILD_NAMES[$i]} (pid $pid) did not stop in ${grace}s; killing it."; fi
        kill -KILL -- "-$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    CHILD_PIDS=()
    CHILD_NAMES=()
}

# --- Redis -----------------------------------------------------------------------------

is_local_host() { [[ "$1" == 127.0.0.1 || "$1" == localhost || "$1" == ::1 || "$1" == 0.0.0.0 ]]; }

install_redis_server() {
    command -v apt-get >/dev/null || die "redis-server is not installed and this machine has no apt-get." \
        "Install Redis 6 or newer (macOS: brew install redis) or point REDIS_URL at one that runs."
    say "redis-server is missing; installing it with apt-get"
    if ! { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; }; then
        die "could not install redis-server with apt-get (root or password-less sudo is needed)." \
            "Install it yourself: sudo apt-get install redis-server — or point REDIS_URL at a Redis that runs."
    fi
}

# ensure_redis URL — makes sure a Redis answers at URL. A local one that is not running is
# started as a child of this script (no persistence, data dir under var/), so it stops with it.
ensure_redis() {
    local url="$1" status=0 host port dir shown
    shown="$(redact "$url")"
    probe redis "$url" || status=$?
    case "$status" in
        0) return 0 ;;
        3) die "a server answers at $shown but not as we asked (see above)." "Fix REDIS_URL (password, db number)." ;;
    esac
    read -r host port < <(probe redis-addr "$url")
    is_local_host "$host" || die "no Redis answers at $shown, and it is not on this machine, so it cannot be started here." \
        "Start it, or unset REDIS_URL to use a local one (redis://127.0.0.1:6379/0)."
    if ! command -v redis-server >/dev/null; then
        install_redis_server
        status=0
        probe redis "$url" || status=$? # the package may have started its own service
        [[ $status -eq 0 ]] && return 0
    fi
    [[ "$host" == localhost || "$host" == 0.0.0.0 ]] && host=127.0.0.1
    dir="$VAR/redis-$port"
    mkdir -p "$dir"
    say "No Redis at $host:$port; starting a private one (no persistence, log in ${dir#"$ROOT"/}/redis.log)"
    start_child "redis-server :$port" - redis-server --bind "$host" --port "$port" --save "" --appendonly no \
        --daemonize no --dir "$dir" --logfile "$dir/redis.log"
    local deadline=$((SECONDS + 15))
    while ((SECONDS < deadline)); do
        if probe redis "$url" 2>/dev/null; then return 0; fi
        child_alive "$CHILD_PID" || break
        sleep 0.2
    done
    tail -n 20 "$dir/redis.log" >&2 || true
    die "the private redis-server on $host:$port did not come up (its log is above)."
}

# --- PostgreSQL ------------------------------------------------------------------------

# ensure_postgres URL — makes sure the PostgreSQL server in URL accepts a login; starts the
# local Debian cluster when nothing listens.
ensure_postgres() {
    local url="$1" status=0 host version shown
    shown="$(redact "$url")"
    probe postgres "$url" || status=$?
    case "$status" in
        0) return 0 ;;
        3) die "PostgreSQL answers but refuses the login in $shown (see above)." \
            "The tests log in as user postgres without a password on 127.0.0.1:5432; set TOOLBAY_TEST_DATABASE_URL to use another server or user." ;;
    esac
    host="$(
        "$PY" -c 'import sys; from urllib.parse import urlsplit; print(urlsplit(sys.argv[1]).hostname or "127.0.0.1")' "$url"
    )"
    is_local_host "$host" || die "no PostgreSQL answers at $host (from $shown)." "Start it, or set TOOLBAY_TEST_DATABASE_URL."
    if [[ ! -d /etc/postgresql ]] || ! command -v pg_ctlcluster >/dev/null; then
        die "no PostgreSQL answers on $host and none is installed here." \
            "Install and start one (Debian/Ubuntu: sudo apt-get install postgresql), allow user postgres to log in over TCP" \
            "from 127.0.0.1 without a password (pg_hba.conf 'trust'), or set TOOLBAY_TEST_DATABASE_URL=postgres://USER:PASSWORD@HOST:PORT/toolbay"
    fi
    version="$(find /etc/postgresql -mindepth 1 -maxdepth 1 -type d -printf "%f\n" | sort -V | tail -n 1)"
    if pg_ctlcluster "$version" main status >/dev/null 2>&1; then
        die "the local PostgreSQL cluster $version/main runs, but nothing answers at the address in $shown." \
            "Compare its port (pg_lsclusters) with TOOLBAY_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/toolbay)."
    fi
    say "No PostgreSQL answers; starting the local cluster $version/main"
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start ||
        die "could not start PostgreSQL $version/main (root or password-less sudo is needed)." \
            "Start it yourself: sudo pg_ctlcluster $version main start"
    local deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)); do
        status=0
        probe postgres "$url" 2>/dev/null || status=$?
        [[ $status -eq 0 ]] && return 0
        sleep 0.5
    done
    probe postgres "$url" || true
    die "PostgreSQL $version/main was started but does not accept the login in $shown."
}

# ensure_deploy_tools — Debian's nginx (the deploy checks' `nginx -t`, and the Procfile test
# behind it) and pgbouncer (that test runs its processes through it in transaction mode),
# installed when missing and apt-get can run as root; otherwise those parts skip.
ensure_deploy_tools() {
    local missing=()
    command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
    command -v pgbouncer >/dev/null || [[ -x /usr/sbin/pgbouncer ]] || missing+=(pgbouncer)
    ((${#missing[@]} == 0)) && return 0
    if command -v apt-get >/dev/null && as_root true 2>/dev/null; then
        say "${missing[*]} missing; installing with apt-get (for the deployment tests)"
        if as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
            { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; }; then
            return 0
        fi
    fi
    warn "${missing[*]} not installed and could not be installed here (apt-get as root is needed):" \
        "the nginx checks skip without nginx, the Procfile test goes without PgBouncer." \
        "Install with: sudo apt-get install ${missing[*]}"
}
