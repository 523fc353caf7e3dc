"""Runs inside Pyodide under Node.js (tools/pyodide-run.mjs, started by
tools/build_playground.py), never in the repository's own Python: it
compiles the playground's Python to bytecode with the interpreter the page
runs (Pyodide's CPython; the repository's Python may be another minor
version, whose .pyc the page could not load).

In /work: ``pykraft-src.zip`` (the project's modules and msgpack's, as
sources), ``python_stdlib.zip`` (Pyodide's standard library, as sources),
``first-screen.py`` (what the page does before its first screen) and
``paths.json`` (where the page mounts the two zips). It runs
``first-screen.py`` against the sources to learn which standard-library
modules the page imports, then writes:

- ``pykraft.zip``: every module's source and, beside it, an unchecked
  hash-based .pyc (zipimport takes the .pyc first, without reading the
  source; tracebacks still show source lines);
- ``python_stdlib.zip``, rewritten: the modules the page imports as .pyc
  only, the rest as Pyodide shipped them.

Compiling is what the page would otherwise do on every load, in
WebAssembly, for some 250 modules.
"""

import importlib.util
import json
import sys
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc

WORK = "/work"
ZIP_TIME = (2020, 1, 1, 0, 0, 0)


def compiled(source: bytes, filename: str) -> bytes:
    code = compile(source, filename, "exec", dont_inherit=True)
    return bytes(_code_to_hash_pyc(code, importlib.util.source_hash(source), checked=False))


def entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


paths = json.loads(open(f"{WORK}/paths.json", encoding="utf-8").read())
stdlib_prefix = paths["stdlib"].rstrip("/") + "/"

sys.path.insert(0, f"{WORK}/pykraft-src.zip")
exec(compile(open(f"{WORK}/first-screen.py", encoding="utf-8").read(), "first-screen.py", "exec"), {})
imported = set()
for module in list(sys.modules.values()):
    origin = getattr(getattr(module, "__spec__", None), "origin", None) or ""
    if origin.startswith(stdlib_prefix) and origin.endswith(".py"):
        imported.add(origin[len(stdlib_prefix):])

project_modules = 0
with zipfile.ZipFile(f"{WORK}/pykraft-src.zip") as sources, zipfile.ZipFile(f"{WORK}/pykraft.zip", "w") as out:
    for name in sources.namelist():
        source = sources.read(name)
        out.writestr(entry(name), source)
        if name.endswith(".py"):
            out.writestr(entry(name + "c"), compiled(source, paths["pykraft"].rstrip("/") + "/" + name))
            project_modules += 1

with zipfile.ZipFile(f"{WORK}/python_stdlib.zip") as original:
    members = [(info, original.read(info)) for info in original.infolist()]
with zipfile.ZipFile(f"{WORK}/python_stdlib.zip", "w") as out:
    for info, data in members:
        if info.filename in imported:
            out.writestr(entry(info.filename + "c"), compiled(data, stdlib_prefix + info.filename))
        else:
            out.writestr(info, data)
print(f"compiled {len(imported)} standard-library modules and the project's {project_modules}")
