#!/usr/bin/env bash
# The Prometheus tests (tests/prometheus: a real server scraping a real
# cluster, `promtool check rules` and `promtool test rules` on
# docs/prometheus/) need Debian's `prometheus` package (prometheus and
# promtool). Installs it when missing and we are root with apt, without its
# recommends (the node exporter) and without starting its service (the
# tests start their own on loopback). Never fails the build: says in one
# line what happened; without it those tests skip with one loud line.
set -u
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing prometheus for the Prometheus tests" >&2
    install() { apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1; }
    # policy-rc.d (101: do not start services) keeps the package's daemon
    # from starting, where the image does not already say so.
    created_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && created_policy=1
    fi
    (install || { apt-get update -qq >/dev/null 2>&1 && install; }) \
        || echo "could not install prometheus: the Prometheus tests will skip" >&2
    [ -n "$created_policy" ] && rm -f /usr/sbin/policy-rc.d
else
    echo "prometheus missing and not root with apt: the Prometheus tests will skip" >&2
fi
exit 0
