#!/usr/bin/env bash
# The npm MCP servers the tests talk to (@modelcontextprotocol/server-everything), installed
# from the lock file in .ci/mcp-node into a cache directory outside the checkout, once:
#
#   ${ART_TEST_MCP_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/art/mcp-node}
#
# tests/mcp_fixtures.py looks there. Later runs reuse it (offline) while the lock file is
# unchanged. Node.js and npm come from Debian packages when missing.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
dir="${ART_TEST_MCP_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/art/mcp-node}"
log() { echo "mcp-servers.sh: $*" >&2; }

if ! command -v npm >/dev/null; then
    log "npm not found: installing Node.js from Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2
    apt-get install -y --no-install-recommends nodejs npm >&2
fi

mkdir -p "$dir"
if cmp -s "$here/mcp-node/package-lock.json" "$dir/package-lock.json" \
    && [[ -x "$dir/node_modules/.bin/mcp-server-everything" ]]; then
    exit 0
fi
log "installing the npm MCP servers into $dir"
cp "$here/mcp-node/package.json" "$here/mcp-node/package-lock.json" "$dir/"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
