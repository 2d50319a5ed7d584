#!/usr/bin/env bash
# Make sure Debian's Chromium is at /usr/bin/chromium (Playwright cannot download browsers here).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "installing Debian's chromium for the Playwright UI tests..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  exit 0
fi
echo "error: the UI tests need Chromium at /usr/bin/chromium; install it with" >&2
echo "       sudo apt-get install -y chromium" >&2
exit 1
