#!/usr/bin/env bash
# The AG-UI protocol's own client (@ag-ui/client, npm) that tests/server/test_agui_client.py
# drives against `art serve`, installed from the lock file in .ci/agui-node into a cache
# directory outside the checkout, once:
#
#   ${ART_TEST_AGUI_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/art/agui-node}
#
# Later runs reuse it (offline) while the lock file is unchanged. Node.js and npm come
# from Debian packages when missing.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
dir="${ART_TEST_AGUI_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/art/agui-node}"
log() { echo "agui-client.sh: $*" >&2; }

if ! command -v npm >/dev/null; then
    log "npm not found: installing Node.js from Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2
    apt-get install -y --no-install-recommends nodejs npm >&2
fi

mkdir -p "$dir"
if cmp -s "$here/agui-node/package-lock.json" "$dir/package-lock.json" \
    && [[ -f "$dir/node_modules/@ag-ui/client/package.json" ]]; then
    exit 0
fi
log "installing @ag-ui/client into $dir"
cp "$here/agui-node/package.json" "$here/agui-node/package-lock.json" "$dir/"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
