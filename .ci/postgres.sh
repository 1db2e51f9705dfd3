#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests, on 127.0.0.1 and a free port.
#
#   eval "$(.ci/postgres.sh start)"   install if needed, start, print `export` lines for
#                                     ART_TEST_POSTGRES_URL and ART_TEST_POSTGRES_DIR
#   .ci/postgres.sh stop [DIR]        stop the server in DIR (default $ART_TEST_POSTGRES_DIR)
#                                     and delete its cluster
#   .ci/postgres.sh install           only install the Debian packages if initdb is missing
#
# ART_PG_OWNER=<pid> (the test session sets it to its own pid) ties the server to a process:
# a later `start` stops and removes servers whose owner has died without stopping them (a
# test run killed by a timeout, say).
#
# PostgreSQL refuses to run as root: as root, the cluster belongs to the `postgres` system
# user (created by the Debian package) and every server command runs through runuser.
# Authentication is `trust` on 127.0.0.1 only: the server is for tests, never for data.
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }

find_bindir() {
    local dir
    if [[ -n "${PG_BINDIR:-}" && -x "$PG_BINDIR/initdb" ]]; then echo "$PG_BINDIR"; return 0; fi
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then echo "$dir"; return 0; fi
    done
    if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
        dirname "$(command -v initdb)"; return 0
    fi
    return 1
}

install() {
    if find_bindir >/dev/null; then return 0; fi
    log "initdb/pg_ctl not found: installing PostgreSQL from Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2
    apt-get install -y --no-install-recommends postgresql >&2
    find_bindir >/dev/null || { log "PostgreSQL binaries still missing after install"; exit 1; }
}

# Run a server command as a user PostgreSQL accepts.
as_pg() {
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

reap_orphans() {
    local owner_file owner
    for owner_file in "${TMPDIR:-/tmp}"/art-pg.*/owner; do
        [[ -f "$owner_file" ]] || continue
        owner="$(cat "$owner_file")"
        if [[ -n "$owner" ]] && ! kill -0 "$owner" 2>/dev/null; then
            log "stopping a server whose owner ($owner) is gone: $(dirname "$owner_file")"
            stop "$(dirname "$owner_file")"
        fi
    done
}

start() {
    install
    reap_orphans
    local bindir dir port
    bindir="$(find_bindir)"
    dir="$(mktemp -d "${TMPDIR:-/tmp}/art-pg.XXXXXX")"
    if [[ "$(id -u)" == 0 ]]; then
        id postgres >/dev/null 2>&1 || useradd --system --home-dir "$dir" postgres
        chown postgres "$dir"
    fi
    chmod 700 "$dir"
    if [[ -n "${ART_PG_OWNER:-}" ]]; then echo "$ART_PG_OWNER" >"$dir/owner"; fi
    port="$(free_port)"
    # --no-sync: initdb's flush of the new cluster to disk takes seconds on a busy disk, and
    # this throwaway cluster never needs to survive a crash of the machine.
    as_pg "$bindir/initdb" --no-sync -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 \
        --no-locale >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    # fsync=off: a crash of this throwaway server may lose data; the tests never crash it.
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c fsync=off -c max_connections=200" \
        >&2 || { cat "$dir/server.log" >&2; exit 1; }
    as_pg "$bindir/createdb" -h 127.0.0.1 -p "$port" -U postgres art_test >&2
    log "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port ($dir)"
    echo "export ART_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:$port/art_test"
    echo "export ART_TEST_POSTGRES_DIR=$dir"
}

stop() {
    local dir="${1:-${ART_TEST_POSTGRES_DIR:-}}" bindir
    [[ -n "$dir" && -d "$dir/data" ]] || { log "no cluster to stop (${dir:-unset})"; return 0; }
    bindir="$(find_bindir)"
    # A fast shutdown: with fsync=off its checkpoint costs nothing, and it returns sooner than
    # an immediate one, whose postmaster can wait seconds for children to notice.
    as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
    rm -rf "$dir"
}

case "${1:-start}" in
    start) start ;;
    stop) stop "${2:-}" ;;
    install) install ;;
    *) echo "usage: $0 [start|stop [DIR]|install]" >&2; exit 2 ;;
esac
