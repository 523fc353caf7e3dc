#!/usr/bin/env bash
# The netns backend of the nemesis (and its tests) needs iproute2 and nft or
# iptables. Installs what is missing when running as root with apt; never
# fails the build: without them the netns tests skip and say why.
set -u
missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} for the netns nemesis tests" >&2
    (apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; }) \
        || echo "could not install ${missing[*]}: the netns tests will skip" >&2
else
    echo "${missing[*]} missing and not root: the netns tests will skip" >&2
fi
exit 0
