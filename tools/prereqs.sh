#!/usr/bin/env bash
# Checks what `make` needs before it builds anything, and says in one sentence
# what is missing. Usage: tools/prereqs.sh PYTHON [--java]
set -u
python=${1:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
    echo "pykraft needs Python 3.11 or newer, and '$python' was not found (set PYTHON=/path/to/python3.11)." >&2
    exit 1
fi
if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    echo "pykraft needs Python 3.11 or newer, and '$python' is $("$python" -c 'import platform; print(platform.python_version())') (set PYTHON=/path/to/python3.11)." >&2
    exit 1
fi
if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "pykraft needs Python's venv and ensurepip modules (on Debian: apt-get install python3-venv)." >&2
    exit 1
fi
if [ "${2:-}" = "--java" ]; then
    if ! command -v java >/dev/null 2>&1; then
        echo "The Spark history checker needs Java 17 or newer on PATH, and no 'java' was found (on Debian: apt-get install openjdk-17-jre-headless)." >&2
        exit 1
    fi
    major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
    if [ -z "$major" ] || [ "$major" -lt 17 ]; then
        echo "The Spark history checker needs Java 17 or newer, and 'java' is version ${major:-unknown}." >&2
        exit 1
    fi
fi
exit 0
