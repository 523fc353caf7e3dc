"""Builds the browser playground (issue 22) into one self-contained folder.

    python tools/build_playground.py [--out build/playground] [--pyodide DIR]

The folder holds the page (``playground/``: HTML, CSS, the JS that draws and
forwards clicks), Pyodide's loader and runtime script, and ``bundle.js``: the
files the page would otherwise fetch (Pyodide's wasm, its standard library,
its lock file, and ``pykraft.zip`` with this repository's Python modules
that ``jepsen_like.sim._playground`` imports, plus msgpack's pure-Python
modules) as base64. Browsers refuse ``fetch`` on file:// URLs, so the page
answers Pyodide's fetches from that bundle: the same folder works from disk
and from any static host, and never touches the network.

The Python goes in compiled: the build runs Pyodide itself under Node.js
(tools/pyodide-run.mjs with tools/playground_compile.py) to turn
``pykraft.zip``'s modules, and the standard-library modules the page's first
screen imports, into .pyc of Pyodide's own CPython version (3.13; the
repository's Python may be another, whose bytecode the page could not
load). Without Node.js the folder ships sources, which the page compiles at
every load (slower, same behaviour), and the build says so in one line.
Compiled zips are cached under the Pyodide cache, keyed by their inputs.

Pyodide comes from tools/playground-fetch.sh (npm, version pinned) in
``${PYKRAFT_CACHE:-~/.cache/pykraft}/pyodide-VERSION``. Exit 2 with one line
when it is missing.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYODIDE_VERSION = "0.29.5"
PAGE = ROOT / "playground"
PAGE_FILES = ("index.html", "playground.css", "playground.js")
# The Pyodide files the page loads (answered from bundle.js, except the two
# scripts, which load as <script> tags: file:// allows those).
PYODIDE_SCRIPTS = ("pyodide.js", "pyodide.asm.js")
PYODIDE_BLOBS = ("pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")
# What the page imports, at start and on first use (a cluster with brokers,
# the first stale-read check); the build ships exactly their import graph.
ENTRY_MODULES = ("jepsen_like.sim._playground", "jepsen_like.sim._lessons", "jepsen_like.sim._brokers", "jepsen_like.sim._reads")
# Fixed zip timestamps: the same tree builds the same bundle.
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)
# Where the page puts pykraft.zip in Pyodide's file system (on sys.path:
# zipimport reads it in place), and where Pyodide mounts its standard library.
PYKRAFT_ZIP_PATH = "/home/pyodide/pykraft.zip"
STDLIB_ZIP_PATH = "/lib/python313.zip"
# What the page does before and just after its first screen (playground.js,
# main()), run at build time to learn which standard-library modules to
# compile.
FIRST_SCREEN = """
import jepsen_like.sim._playground as playground
import jepsen_like.sim._lessons as lessons
lessons.lessons_json()
driver = playground.PageDriver.from_json(7, "{}")
driver.view_json()
driver.advance(2_000_000)
driver.act('{"do": "write", "node": 1, "key": "k", "value": "v1"}')
driver.act('{"do": "read", "node": 1, "key": "k", "mode": "leader-local"}')
driver.advance(3_000_000)
driver.view_json()
driver.session_json()
driver.rewind(1_000_000)
lessons.check_json("election", driver)
playground.PageDriver.from_json(7, '{"brokers": true}').view_json()
"""
COMPILE_TIMEOUT_S = 600
COMPILED_KEPT = 8


def default_pyodide_dir() -> Path:
    cache = os.environ.get("PYKRAFT_CACHE") or str(Path.home() / ".cache" / "pykraft")
    return Path(cache) / f"pyodide-{PYODIDE_VERSION}"


def python_sources() -> list[tuple[str, Path]]:
    """(path in the zip, file) for every module the entry modules import
    from this repository or from msgpack (pure Python: the C extension is
    left out, and msgpack falls back to ``msgpack.fallback``)."""
    probe = (
        "import json, sys\n"
        f"import {', '.join(ENTRY_MODULES)}\n"
        "print(json.dumps(sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, '__file__', None)})))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), MSGPACK_PUREPYTHON="1")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    import msgpack

    msgpack_dir = Path(msgpack.__file__).resolve().parent
    sources: list[tuple[str, Path]] = []
    for name in json.loads(done.stdout):
        path = Path(name).resolve()
        if path.suffix != ".py":
            continue
        # msgpack first: the virtualenv may live inside the repository
        # (``make`` creates .venv there), and nothing else of it belongs in
        # the page.
        if path.is_relative_to(msgpack_dir):
            sources.append(("msgpack/" + path.relative_to(msgpack_dir).as_posix(), path))
        elif path.is_relative_to(ROOT) and not path.is_relative_to(ROOT / ".venv"):
            sources.append((path.relative_to(ROOT).as_posix(), path))
    if not any(arc == "msgpack/fallback.py" for arc, _ in sources):
        raise SystemExit("build_playground: msgpack's pure-Python fallback was not imported")
    return sorted(sources)


def python_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for arcname, path in python_sources():
            info = zipfile.ZipInfo(arcname, _ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def compiled_zips(pyodide_dir: Path, sources_zip: bytes) -> tuple[bytes, bytes] | None:
    """(pykraft.zip, python_stdlib.zip) with bytecode compiled by Pyodide's
    own CPython under Node.js (module docstring), from the cache when these
    inputs were compiled before; None, with one line on stderr, when Node.js
    is missing or the compile fails."""
    runner, script = ROOT / "tools" / "pyodide-run.mjs", ROOT / "tools" / "playground_compile.py"
    stdlib = (pyodide_dir / "python_stdlib.zip").read_bytes()
    paths = json.dumps({"pykraft": PYKRAFT_ZIP_PATH, "stdlib": STDLIB_ZIP_PATH}, sort_keys=True)
    key = hashlib.sha256()
    for part in (PYODIDE_VERSION.encode(), sources_zip, stdlib, FIRST_SCREEN.encode(), paths.encode(), runner.read_bytes(), script.read_bytes()):
        key.update(hashlib.sha256(part).digest())
    cache = pyodide_dir.parent / "playground-compiled" / key.hexdigest()[:32]
    try:
        return (cache / "pykraft.zip").read_bytes(), (cache / "python_stdlib.zip").read_bytes()
    except OSError:
        pass  # not compiled yet (or pruned just now by another build)
    node = shutil.which("node")
    if node is None:
        print("build_playground: no Node.js: the page ships Python sources and compiles them at every load (slower)", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory(prefix="playground-compile-") as work:
        work_dir = Path(work)
        (work_dir / "pykraft-src.zip").write_bytes(sources_zip)
        (work_dir / "python_stdlib.zip").write_bytes(stdlib)
        (work_dir / "first-screen.py").write_text(FIRST_SCREEN, encoding="utf-8")
        (work_dir / "paths.json").write_text(paths, encoding="utf-8")
        try:
            done = subprocess.run(
                [node, str(runner), str(pyodide_dir), str(work_dir), str(script)],
                capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            done = None
        if done is None or done.returncode != 0:
            why = "timed out" if done is None else (done.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"build_playground: compiling with Pyodide under Node.js failed ({why}): the page ships Python sources (slower)", file=sys.stderr)
            return None
        # Into the cache whole or not at all: builds may run side by side.
        cache.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=cache.name + ".partial-", dir=cache.parent))
        for name in ("pykraft.zip", "python_stdlib.zip"):
            shutil.copyfile(work_dir / name, staging / name)
        try:
            staging.rename(cache)
        except OSError:  # another build got there first, with the same bytes
            shutil.rmtree(staging, ignore_errors=True)
        # Every tree that builds leaves an entry (some 4 MB): keep the newest.
        entries = sorted((e for e in cache.parent.iterdir() if ".partial-" not in e.name), key=lambda e: e.stat().st_mtime, reverse=True)
        for stale in entries[COMPILED_KEPT:]:
            shutil.rmtree(stale, ignore_errors=True)
        return (work_dir / "pykraft.zip").read_bytes(), (work_dir / "python_stdlib.zip").read_bytes()


def build(out: Path, pyodide_dir: Path) -> Path:
    """Write the playground folder to ``out`` (replacing it); its index."""
    missing = [name for name in (*PYODIDE_SCRIPTS, *PYODIDE_BLOBS) if not (pyodide_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(f"no Pyodide {PYODIDE_VERSION} in {pyodide_dir} (run tools/playground-fetch.sh): missing {', '.join(missing)}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in PAGE_FILES:
        shutil.copyfile(PAGE / name, out / name)
    for name in PYODIDE_SCRIPTS:
        shutil.copyfile(pyodide_dir / name, out / name)
    blobs = {name: (pyodide_dir / name).read_bytes() for name in PYODIDE_BLOBS}
    sources_zip = python_zip()
    compiled = compiled_zips(pyodide_dir, sources_zip)
    if compiled is None:
        blobs["pykraft.zip"] = sources_zip
    else:
        blobs["pykraft.zip"], blobs["python_stdlib.zip"] = compiled
    with open(out / "bundle.js", "w", encoding="ascii") as bundle:
        bundle.write(f"// Built by tools/build_playground.py: Pyodide {PYODIDE_VERSION} and pykraft's modules, as base64.\n")
        bundle.write(f"window.PYKRAFT_PYODIDE_VERSION = {json.dumps(PYODIDE_VERSION)};\n")
        bundle.write(f"window.PYKRAFT_ZIP_PATH = {json.dumps(PYKRAFT_ZIP_PATH)};\n")
        bundle.write(f"window.PYKRAFT_COMPILED = {json.dumps(compiled is not None)};\n")
        bundle.write("window.PYKRAFT_FILES = {\n")
        for name, data in blobs.items():
            bundle.write(f"{json.dumps(name)}: \"{base64.b64encode(data).decode('ascii')}\",\n")
        bundle.write("};\n")
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "playground")
    parser.add_argument("--pyodide", type=Path, default=None, help="Pyodide's npm package folder (default: the fetch script's cache)")
    args = parser.parse_args(argv)
    try:
        index = build(args.out, args.pyodide or default_pyodide_dir())
    except FileNotFoundError as missing:
        print(f"build_playground: {missing}", file=sys.stderr)
        return 2
    print(f"playground built: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
