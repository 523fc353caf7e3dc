"""The Spark session the checker runs in."""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"

# The JVM's own stderr (log4j's console, the JVM's startup warnings, the
# Python workers' stderr) goes to the run's Spark log file, not the terminal
# (see spark_session): warnings are worth keeping there.
_LOG4J2_PROPERTIES = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""

# Shipped to executors once per process: the checker's own modules (so that
# executors on other machines, or Python workers that do not share the
# driver's sys.path, can import the search and the models).
_shipped_zip: Path | None = None


def _package_zip() -> Path:
    global _shipped_zip
    if _shipped_zip is None:
        package_root = Path(__file__).resolve().parent  # jepsen_like/checker
        outer = package_root.parent  # jepsen_like
        directory = Path(tempfile.mkdtemp(prefix="jepsen-like-checker-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        target = directory / "jepsen_like_checker.zip"
        with zipfile.ZipFile(target, "w") as archive:
            archive.write(outer / "__init__.py", "jepsen_like/__init__.py")
            for source in sorted(package_root.glob("*.py")):
                archive.write(source, f"jepsen_like/checker/{source.name}")
        _shipped_zip = target
    return _shipped_zip


def _log4j_file() -> Path:
    # Named after its content: checkouts with different settings on one
    # machine must not rewrite each other's file under a starting JVM.
    digest = hashlib.sha256(_LOG4J2_PROPERTIES.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"jepsen-like-log4j2-{digest}.properties"
    if not path.exists() or path.read_text() != _LOG4J2_PROPERTIES:
        path.write_text(_LOG4J2_PROPERTIES)
    return path


def default_log_path() -> Path:
    """Where a session started without a log path writes Spark's output."""
    return Path(tempfile.gettempdir()) / "jepsen-like-check-spark.log"


def spark_session(
    master: str = DEFAULT_MASTER,
    *,
    conf: Mapping[str, str] | None = None,
    app_name: str = "jepsen-like check",
    log_path: str | Path | None = None,
    small_input: bool = False,
) -> "SparkSession":
    """Get (or start) the Spark session the checker uses.

    ``master`` is any Spark master URL: ``local[*]`` (the default) runs Spark
    inside this process's JVM; ``spark://host:7077`` runs the same job on a
    standalone cluster. If a session is already running it is reused as is
    (``master``, ``conf``, ``log_path`` and ``small_input`` then only apply
    to a new one).

    A new session's JVM writes everything it prints (log4j, its startup
    warnings, the Python workers' stderr) to ``log_path`` (appended; default
    :func:`default_log_path`), never to this process's terminal.
    ``small_input`` starts a JVM tuned for a short life (histories of a few
    thousand events): it compiles less and collects garbage in one thread.

    Raises whatever PySpark raises when Java or the master is unavailable,
    and ``OSError`` when the log file cannot be opened.
    """
    # The Makefile exports these; set them here too so that a plain
    # `python -m jepsen_like.checker` behaves the same.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYTHONHASHSEED", "0")

    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        _ship_package(active)
        return active
    is_local = master.startswith("local")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Few, adaptive shuffle partitions: histories are many and small, or
        # one and large; AQE coalesces what the first guess gets wrong.
        .config("spark.sql.shuffle.partitions", "8" if is_local else "64")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.adaptive.coalescePartitions.enabled", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Listing more paths than this starts a Spark job per read; histories
        # are local files, listed faster by the driver itself.
        .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")
        .config("spark.driver.extraJavaOptions", _driver_java_options(small_input))
        .config("spark.executorEnv.PYTHONHASHSEED", "0")
    )
    if is_local:
        # In local mode the driver JVM is the executor: give it room for
        # ten-million-operation histories.
        builder = builder.config("spark.driver.memory", "4g")
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    session = _start_logging_to(Path(log_path) if log_path is not None else default_log_path(), builder)
    _ship_package(session)
    return session


def _driver_java_options(small_input: bool) -> str:
    options = [f"-Dlog4j2.configurationFile=file:{_log4j_file()}"]
    if small_input:
        # A check of a small history lives for seconds: the optimising JIT
        # compiler's work would not pay back, and one GC thread leaves the
        # second core to the job.
        options += ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    return " ".join(options)


def _start_logging_to(log_path: Path, builder: "SparkSession.Builder") -> "SparkSession":
    """``builder.getOrCreate()`` with file descriptor 2 pointing at
    ``log_path`` while the JVM is launched: the JVM (and every process it
    starts) inherits it as its stderr. This process's stderr is restored
    before returning."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stderr.flush()
    saved_fd = os.dup(2)
    try:
        os.dup2(log_fd, 2)
        return builder.getOrCreate()
    finally:
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        os.close(log_fd)


def _ship_package(session: "SparkSession") -> None:
    context = session.sparkContext
    zip_path = _package_zip()
    shipped = getattr(context, "_jepsen_like_checker_shipped", None)
    if shipped != str(zip_path):
        context.addPyFile(str(zip_path))
        context._jepsen_like_checker_shipped = str(zip_path)  # type: ignore[attr-defined]
