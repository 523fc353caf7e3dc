// Runs a Python file in Pyodide under Node.js, with a host directory
// mounted at /work (tools/build_playground.py uses it to compile the
// playground's Python with the very interpreter the page runs).
//
//   node tools/pyodide-run.mjs PYODIDE_DIR WORK_DIR SCRIPT.py
//
// Exits 1 with Python's traceback on stderr when the script raises.
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";
import path from "node:path";

const [pyodideDir, workDir, script] = process.argv.slice(2);
if (!pyodideDir || !workDir || !script) {
  console.error("usage: node tools/pyodide-run.mjs PYODIDE_DIR WORK_DIR SCRIPT.py");
  process.exit(2);
}
const { loadPyodide } = await import(pathToFileURL(path.join(pyodideDir, "pyodide.mjs")).href);
const py = await loadPyodide({ indexURL: path.resolve(pyodideDir) + path.sep, stdout: (s) => console.log(s), stderr: (s) => console.error(s) });
py.mountNodeFS("/work", path.resolve(workDir));
try {
  py.runPython(readFileSync(script, "utf-8"), { filename: script });
} catch (error) {
  console.error(String(error));
  process.exit(1);
}
