#!/usr/bin/env bash
# `make deploy-docker`: the container image and deploy/compose.yaml, run for real. Needs root
# and about 1.5 GB; not part of `make test`.
#
# 1. dockerd: started when `docker info` fails (`--bridge=none --iptables=false`: the machine's
#    own networking is left alone; compose's network still connects the containers), and
#    stopped again at the end. Debian's docker.io, docker-compose and debootstrap are installed
#    when missing.
# 2. Stand-in base images: Docker Hub is not reachable here, so python:3.11-slim, postgres:16
#    and redis:7-alpine are built locally from one Debian bookworm root filesystem
#    (debootstrap, `docker import`) and deploy/standin/. Built once; kept in the daemon.
# 3. The image from deploy/Dockerfile (`--network host`: pip reaches PyPI).
# 4. deploy/compose.yaml with `up --scale web=2` (web's fixed host port dropped, as compose.yaml
#    says for several web instances), waiting until every service is healthy or done (compose
#    v2's `up --wait`; with docker-compose 1.x the same wait is done here), seed_demo and a key.
# 5. The smoke test (scripts/deploy_smoke.py) from the host through the compose network: a
#    session started on one web container continues on the other, an SSE stream, a
#    background call on the worker container, nothing else restarted.
# 6. `down --volumes` (also after a failure), and dockerd stopped if this script started it.
#
# Knobs: DEPLOY_DOCKER_KEEP=1 leaves the containers running; DEBIAN_MIRROR.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

WORK="$VAR/deploy-docker"
PROJECT=toolbay-smoke
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
mkdir -p "$WORK"
[[ $(id -u) -eq 0 ]] || die "make deploy-docker needs root (dockerd, debootstrap)."

ensure_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || missing+=(docker-compose)
    ((${#missing[@]} == 0)) && return 0
    say "Installing ${missing[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

DOCKERD_PID=""
ensure_dockerd() {
    docker info >/dev/null 2>&1 && return 0
    say "Starting dockerd (--bridge=none --iptables=false; log: $WORK/dockerd.log)"
    dockerd --bridge=none --iptables=false >"$WORK/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    local deadline=$((SECONDS + 60))
    until docker info >/dev/null 2>&1; do
        kill -0 "$DOCKERD_PID" 2>/dev/null || die "dockerd exited; see $WORK/dockerd.log"
        ((SECONDS < deadline)) || die "dockerd did not answer within 60 s; see $WORK/dockerd.log"
        sleep 0.5
    done
}

compose() {
    if docker compose version >/dev/null 2>&1; then
        docker compose -p "$PROJECT" -f "$WORK/compose.yaml" "$@"
    else
        docker-compose -p "$PROJECT" -f "$WORK/compose.yaml" "$@"
    fi
}

cleanup() {
    local status=$?
    if [[ -f "$WORK/compose.yaml" && -z "${DEPLOY_DOCKER_KEEP:-}" ]]; then
        ((status == 0)) || compose logs --no-color >"$WORK/compose.log" 2>&1 || true
        compose down --volumes --remove-orphans >/dev/null 2>&1 || true
        ((status == 0)) || warn "The containers' logs are in $WORK/compose.log"
    fi
    if [[ -n "$DOCKERD_PID" && -z "${DEPLOY_DOCKER_KEEP:-}" ]]; then
        kill "$DOCKERD_PID" 2>/dev/null && wait "$DOCKERD_PID" 2>/dev/null || true
    fi
    return "$status"
}
trap cleanup EXIT

standin_images() {
    if docker image inspect python:3.11-slim postgres:16 redis:7-alpine >/dev/null 2>&1; then
        return 0
    fi
    if ! docker image inspect toolbay-standin-base >/dev/null 2>&1; then
        say "Building the stand-in base image (debootstrap bookworm from $MIRROR; a few minutes, once)"
        local rootfs="$WORK/rootfs"
        rm -rf "$rootfs"
        debootstrap --variant=minbase \
            --include=python3,python3-pip,python3-venv,postgresql,redis-server,ca-certificates \
            bookworm "$rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
            die "debootstrap failed; see $WORK/debootstrap.log"
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -c . | docker import - toolbay-standin-base >/dev/null
        rm -rf "$rootfs"
    fi
    say "Tagging the stand-ins python:3.11-slim, postgres:16 and redis:7-alpine (local daemon only)"
    # This machine's own extra CA certificates (an egress proxy's) go into the Python stand-in,
    # so pip reaches PyPI from the image build as it does from here.
    local name context="$WORK/standin"
    rm -rf "$context" && cp -r deploy/standin "$context" && mkdir -p "$context/ca"
    cp /usr/local/share/ca-certificates/*.crt "$context/ca/" 2>/dev/null || true
    for name in python:3.11-slim postgres:16 redis:7-alpine; do
        docker build -q -t "$name" -f "$context/Dockerfile.${name%%:*}" "$context" >/dev/null 2>&1 ||
            die "could not build the stand-in $name"
    done
}

# compose.yaml as it is, but for the build (done before, with network) and web's host port;
# Toolbay's containers run as the Helm chart runs them: read-only root filesystem with a
# tmpfs on /tmp, no capabilities, no privilege escalation.
write_compose() {
    "$PY" - "$ROOT/deploy/compose.yaml" "$WORK/compose.yaml" <<'PY'
import sys, yaml
source, target = sys.argv[1:]
spec = yaml.safe_load(open(source))
for service in spec["services"].values():
    service.pop("build", None)
    if service.get("image") == "toolbay:latest":
        service.update(read_only=True, tmpfs=["/tmp"], cap_drop=["ALL"], security_opt=["no-new-privileges:true"])
spec["services"]["web"].pop("ports", None)
spec.pop("name", None)
yaml.safe_dump(spec, open(target, "w"), sort_keys=False)
PY
}

# compose v2's `up --wait`: every service with a healthcheck healthy, the one-shot ones done.
wait_healthy() {
    local deadline=$((SECONDS + 180)) id state pending
    while :; do
        pending=0
        for id in $(compose ps -q); do
            state="$(docker inspect -f '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}} {{.State.ExitCode}}' "$id")"
            case "$state" in
                *" running healthy "* | *" running  "*) ;;
                *" exited  0") ;;
                *" exited "*) die "a container failed: $state" ;;
                *) pending=1 ;;
            esac
        done
        ((pending == 0)) && return 0
        ((SECONDS < deadline)) || die "services not healthy within 180 s: $(compose ps)"
        sleep 1
    done
}

ensure_packages
ensure_dockerd
standin_images
say "Building the image from deploy/Dockerfile"
# The context is what git tracks or would (Debian's docker.io builds without BuildKit, which
# alone reads deploy/Dockerfile.dockerignore); less its exclusions, all under .gitignore too.
git ls-files -z --cached --others --exclude-standard | tar --null -T - -c |
    docker build --network host --force-rm -q -f deploy/Dockerfile -t toolbay:latest - >/dev/null
write_compose
export SECRET_KEY TOOLBAY_SECRET_KEYS
SECRET_KEY="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(50))')"
TOOLBAY_SECRET_KEYS="$("$PY" -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
say "docker compose up --scale web=2"
compose down --volumes --remove-orphans >/dev/null 2>&1 || true
if docker compose version >/dev/null 2>&1; then
    compose up --detach --no-build --wait --scale web=2
else
    compose up --detach --no-build --scale web=2
    wait_healthy
fi
compose run --rm migrate python manage.py seed_demo >/dev/null
KEY="$(compose run --rm migrate python manage.py create_api_key demo --name smoke | tail -n 1 | tr -d '\r')"
webs=()
for id in $(compose ps -q web); do
    webs+=(--web "http://$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$id"):8000")
done
say "Smoke test through the compose network (${webs[*]})"
"$PY" scripts/deploy_smoke.py --key "$KEY" "${webs[@]}"
say "make deploy-docker passed"
