#!/usr/bin/env bash
# The quorum benchmark's peers (bench/README.md, "Installing the peers"):
# Debian's etcd-server and zookeeper when they are missing and we are root
# with apt, and the Python clients of pyproject.toml's `bench` extra (pinned
# there) into the virtualenv whose interpreter is $1. Never fails the build:
# says in one line what it could not install; bench.quorum_bench then skips
# that peer with the command that installs it.
set -u
python="${1:?usage: tools/bench-peers.sh PYTHON}"
packages=()
command -v etcd >/dev/null 2>&1 || packages+=(etcd-server)
[ -e /usr/share/java/zookeeper.jar ] || packages+=(zookeeper)
if [ "${#packages[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing ${packages[*]} for the quorum benchmark's peers" >&2
        (apt-get install -y -qq "${packages[@]}" >/dev/null 2>&1 \
            || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "${packages[@]}" >/dev/null 2>&1; }) \
            || echo "could not install ${packages[*]}: the benchmark skips them" >&2
        # Debian starts the packaged etcd as a service; the benchmark runs its
        # own three, on ports of its choosing, and needs none.
        if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
            systemctl stop etcd >/dev/null 2>&1 || true
        fi
    else
        echo "${packages[*]} missing and not root with apt: the benchmark skips them" >&2
    fi
fi
requirements=$("$python" -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["bench"]))') \
    || { echo "could not read the bench extra from pyproject.toml" >&2; exit 0; }
# shellcheck disable=SC2086  # one word per requirement
"$python" -m pip install --quiet --disable-pip-version-check $requirements \
    || echo "could not install $requirements: the benchmark skips the peers that need them" >&2
exit 0
