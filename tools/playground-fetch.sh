#!/usr/bin/env bash
# Fetches Pyodide for the browser playground (issue 22): the npm package
# pyodide@0.29.5 (Python 3.13), its tarball checked against a pinned sha256,
# unpacked into ${PYKRAFT_CACHE:-$HOME/.cache/pykraft}/pyodide-0.29.5 (outside
# the tree; nothing of Pyodide is committed). tools/build_playground.py copies
# what the page needs from there. A no-op once fetched. Never fails the build:
# it prints one line saying what happened; without Pyodide the playground's
# browser tests skip with one loud line.
set -u
version=0.29.5
sha256=6749b10ee515a1458ecea36d860c8ce2a48366e85b3f92d749ad1840e4aff181
dest="${PYKRAFT_CACHE:-$HOME/.cache/pykraft}/pyodide-$version"
stamp="$dest/.complete"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sha256" ]; then
    echo "pyodide $version: already fetched in $dest" >&2
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "pyodide $version: not fetched (npm not found; install Node.js): the playground browser tests will skip" >&2
    exit 0
fi
mkdir -p "$(dirname "$dest")" || { echo "pyodide $version: not fetched (cannot create $(dirname "$dest"))" >&2; exit 0; }
staging=$(mktemp -d "$dest.partial.XXXXXX")
if (cd "$staging" && npm pack --silent "pyodide@$version" >npm.log 2>&1) \
        && echo "$sha256  $staging/pyodide-$version.tgz" | sha256sum --check --status 2>/dev/null \
        && tar -xzf "$staging/pyodide-$version.tgz" -C "$staging"; then
    rm -rf "$dest" && mv "$staging/package" "$dest" && rm -rf "$staging"
    echo "$sha256" >"$stamp"
    echo "pyodide $version: fetched into $dest" >&2
else
    mv "$staging/npm.log" "$dest.fetch.log" 2>/dev/null
    rm -rf "$staging"
    echo "pyodide $version: fetch failed or checksum mismatch (npm's log: $dest.fetch.log): the playground browser tests will skip" >&2
fi
exit 0
