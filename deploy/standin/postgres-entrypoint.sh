#!/bin/sh
# Stand-in for the postgres image's entrypoint (make deploy-docker): initialises the cluster
# once with POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB, then runs the server.
set -eu
PGDATA="${PGDATA:-/var/lib/postgresql/data}"
BIN=$(echo /usr/lib/postgresql/*/bin)
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /run/postgresql
    chown -R postgres:postgres "$PGDATA" /run/postgresql
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" >/tmp/pwfile
    "$BIN/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile=/tmp/pwfile --auth-host=scram-sha-256 --auth-local=trust
    rm -f /tmp/pwfile
    echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
    "$BIN/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -w start
    if [ "$POSTGRES_DB" != postgres ]; then
        "$BIN/createdb" -U "$POSTGRES_USER" "$POSTGRES_DB"
    fi
    "$BIN/pg_ctl" -D "$PGDATA" -m fast -w stop
fi
exec "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*'
