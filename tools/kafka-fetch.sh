#!/usr/bin/env bash
# Fetches Apache Kafka 4.4.0 (KRaft) for the side-by-side benchmark and the
# Kafka tests: the jars of tools/kafka/pom.xml and their runtime dependencies,
# from Maven Central, into ${PYKRAFT_CACHE:-$HOME/.cache/pykraft}/kafka-4.4.0/libs
# (outside the source tree; nothing of Kafka is committed).
# A no-op when already fetched for this pom. Never fails the build: it prints
# one line saying what happened; without Kafka the Kafka test skips and the
# benchmark leaves Kafka's column out, each saying how to fetch it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
pom="$here/kafka/pom.xml"
dest="${PYKRAFT_CACHE:-$HOME/.cache/pykraft}/kafka-4.4.0"
libs="$dest/libs"
stamp="$libs/.complete"
want=$(sha256sum "$pom" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "kafka 4.4.0: already fetched in $libs" >&2
    exit 0
fi
if ! command -v mvn >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # As tools/net-tools.sh does for its tools: install what is missing when we can.
    apt-get install -y -qq maven >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq maven >/dev/null 2>&1; }
fi
for tool in mvn java; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "kafka 4.4.0: not fetched ($tool not found; apt-get install maven openjdk-17-jdk-headless): the Kafka test will skip" >&2
        exit 0
    fi
done
mkdir -p "$dest" || { echo "kafka 4.4.0: not fetched (cannot create $dest)" >&2; exit 0; }
staging=$(mktemp -d "$dest/libs.partial.XXXXXX")
started=$(date +%s)
if mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$staging" \
        >"$dest/fetch.log" 2>&1; then
    echo "$want" >"$staging/.complete"
    rm -rf "$libs" && mv "$staging" "$libs"
    echo "kafka 4.4.0: fetched into $libs in $(( $(date +%s) - started )) s ($(ls "$libs" | wc -l) jars)" >&2
else
    rm -rf "$staging"
    echo "kafka 4.4.0: fetch failed (Maven log: $dest/fetch.log): the Kafka test will skip" >&2
fi
exit 0
