#!/usr/bin/env bash
# Installs what the tests run besides Go: redis-server (real Redis for every test), chromium
# (the browser test of the monitoring UI) and promtool from Debian's prometheus package (checks
# /metrics), and PostgreSQL's server (the sqlfence tests start their own). Uses apt when missing;
# says what to do otherwise.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  missing+=(chromium)
fi
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
# setpriv runs the Dockerfile-built binary as the image's non-root user (cmd/jobguard/dockerfile_test.go).
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
# PostgreSQL's server binaries (initdb, postgres) for the SQL fence tests; Debian puts them here.
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "make test needs: ${missing[*]}. Install them (Debian/Ubuntu: sudo apt-get install -y ${missing[*]}) or run make test as root." >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "make test needs: ${missing[*]}, and there is no apt-get here to install them. Install them and run make test again." >&2
  exit 1
fi
echo "installing ${missing[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
