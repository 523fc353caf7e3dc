#!/usr/bin/env bash
# The report and replay browser tests render their page in headless Chromium
# (tests/headless_chromium.py looks for /usr/bin/chromium). Installs Debian's
# `chromium` package when it is missing and we are root with apt; never fails
# the build: says in one line what happened, and without Chromium those tests
# skip with one loud line in pytest's summary.
set -u
[ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium for the report and replay browser tests" >&2
    (apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; }) \
        || echo "could not install chromium: the report and replay browser tests will skip" >&2
else
    echo "chromium missing and not root with apt: the report and replay browser tests will skip" >&2
fi
exit 0
