"""The Spark session the checker runs in."""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"

# Spark's logging settings, shipped with the package: everything to the
# JVM's stderr, which spark_session points at the run's Spark log file.
LOG4J2_PROPERTIES = Path(__file__).resolve().with_name("log4j2.properties")

# Class data sharing for the driver JVM of a short check (JDK 13+ dynamic
# archives): the classes Spark loads to start and to run a check (about ten
# thousand) are parsed and verified once, dumped to an archive when that JVM
# exits, and mapped from it by every later JVM with the same Java, Spark and
# options. It takes about a third off starting the session and the first
# job. This variable names the directory the archives are kept in, or is
# "0" to do without.
CLASS_ARCHIVE_ENV = "JEPSEN_LIKE_CHECK_CLASS_ARCHIVES"
# A dump lock older than this was left by a run that died before finishing.
_ARCHIVE_LOCK_STALE_S = 600
# Waited for the JVM to write the archive and exit (the first run only).
_ARCHIVE_DUMP_TIMEOUT_S = 120
# Archives kept in the directory: one is written per Java, Spark install and
# option set (each virtualenv has its own Spark), about 170 MB each; the
# oldest beyond these go when a new one is written.
CLASS_ARCHIVES_KEPT = 4

# The memory pages of a small input's sorts, aggregations and hash joins.
# Spark sizes them from the memory it has (64 MB each with the driver's 4 GB
# and two cores), and every task that sorts, aggregates or builds a hash
# table takes at least one: a 3-operation check allocated (and zeroed, and
# the collector copied) about 470 MB of them, for kilobytes of rows. A
# record larger than a page gets a page of its own size, so no input is
# refused for it (docs/benchmarks.md, "Session start overlapped and fewer
# jobs").
SMALL_INPUT_PAGE_SIZE = "1m"

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


def default_log_path() -> Path:
    """Where a session started without a log path writes Spark's output."""
    return Path(tempfile.gettempdir()) / "jepsen-like-check-spark.log"


DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
DATAFRAME_DEBUGGING = "spark.python.sql.dataFrameDebugging.enabled"


def merged_java_options(conf: Mapping[str, str] | None, java_options: str) -> tuple[dict[str, str], str]:
    """``conf`` without ``spark.driver.extraJavaOptions``, and the checker's
    own driver JVM options followed by the ones it named: a user's
    ``--spark-conf spark.driver.extraJavaOptions=...`` adds to the
    checker's options (its log4j configuration, its class data archive)
    instead of replacing them, and wins where both set one flag (the JVM
    takes the last)."""
    rest = dict(conf or {})
    extra = rest.pop(DRIVER_JAVA_OPTIONS, "").strip()
    if _GC_CHOICE.search(extra):
        # The JVM refuses to start with two collectors chosen ("Multiple
        # garbage collectors selected"): the user's choice replaces ours.
        java_options = " ".join(option for option in java_options.split() if not _GC_CHOICE.fullmatch(option))
    return rest, f"{java_options} {extra}" if extra else java_options


# A JVM option that chooses the garbage collector (not one that tunes it,
# such as -XX:+UseGCOverheadLimit).
_GC_CHOICE = re.compile(r"-XX:\+Use(?:Serial|Parallel|ParallelOld|G1|Z|Shenandoah|Epsilon|ConcMarkSweep)GC\b")


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
    warnings, the Python workers' stdout and stderr) to ``log_path``
    (appended; default :func:`default_log_path`), never to this process's
    terminal. ``small_input`` starts a JVM tuned for a short life
    (histories of a few thousand events): it compiles less, collects
    garbage in one thread, sorts and aggregates in small memory pages
    (:data:`SMALL_INPUT_PAGE_SIZE`), and maps its classes from a class data archive
    (:data:`CLASS_ARCHIVE_ENV`). The first such session on a machine has
    none yet: its JVM writes the archive when this process exits (a few
    seconds, once), and the sessions after it start faster.

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

    from jepsen_like.checker._java_lookups import cache_java_lookups

    active = SparkSession.getActiveSession()
    if active is not None:
        _ship_package(active)
        cache_java_lookups()
        return active
    is_local = master.startswith("local")
    java_options, archive_dump = _driver_java_options(small_input)
    conf, java_options = merged_java_options(conf, java_options)
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
        .config(DRIVER_JAVA_OPTIONS, java_options)
        # PySpark's DataFrame debugging: every F.col made on the thread
        # that started the session (the library's check() with a session
        # of its own) would first walk this process's Python stack and
        # send the call site to the JVM, five more round trips each. It
        # only names the Python line in the text of a Spark error.
        .config(DATAFRAME_DEBUGGING, "false")
        .config("spark.executorEnv.PYTHONHASHSEED", "0")
    )
    if is_local:
        # In local mode the driver JVM is the executor: give it room for
        # ten-million-operation histories.
        builder = builder.config("spark.driver.memory", "4g")
    if small_input:
        builder = builder.config("spark.buffer.pageSize", SMALL_INPUT_PAGE_SIZE)
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    try:
        session = _start_logging_to(Path(log_path) if log_path is not None else default_log_path(), builder)
    except BaseException:
        if archive_dump is not None:
            archive_dump.lock.unlink(missing_ok=True)
        raise
    if archive_dump is not None:
        atexit.register(archive_dump.finish)
    _ship_package(session)
    cache_java_lookups()
    return session


class SessionStart:
    """A Spark session being started (:func:`spark_session`) on a thread of
    its own, so that what this process does meanwhile (importing the job's
    modules: pyspark.sql's DataFrame API, pyarrow, the checker) overlaps the
    JVM's start instead of preceding it.

    While the session starts, this process's file descriptors 1 and 2 point
    at the Spark log (see :func:`spark_session`): the caller must not print
    until :meth:`result` (or :meth:`wait`) has returned.

    ``one_check``: this process checks once and exits (the command line).
    The Java objects its queries are built of (columns, plans: thousands)
    are then not released one by one as Python drops them, each release a
    round trip to the JVM (a third of a small check's round trips), but all
    at once with the JVM (:func:`keep_java_objects_until_exit`). Not for a
    session already running: it may live on.
    """

    def __init__(
        self,
        master: str = DEFAULT_MASTER,
        *,
        conf: Mapping[str, str] | None = None,
        log_path: str | Path | None = None,
        small_input: bool = False,
        one_check: bool = False,
    ) -> None:
        # Imported here, on the caller's thread, not on the starting one:
        # two threads importing pyspark's mutually dependent modules at
        # once can deadlock on Python's per-module import locks.
        import pyspark.java_gateway  # noqa: F401
        from pyspark.sql import SparkSession

        self._session: SparkSession | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if SparkSession.getActiveSession() is not None:
            # This thread's session is reused as is (see spark_session): a
            # thread of its own would not see it as active, and would
            # apply the checker's settings to it.
            self._start(master, conf, log_path, small_input, one_check=False)
            return
        self._thread = threading.Thread(
            target=self._start, args=(master, conf, log_path, small_input, one_check), name="checker-spark-start",
            daemon=True,
        )
        self._thread.start()

    def _start(
        self, master: str, conf: Mapping[str, str] | None, log_path: str | Path | None, small_input: bool,
        one_check: bool,
    ) -> None:
        try:
            self._session = spark_session(master, conf=conf, log_path=log_path, small_input=small_input)
            if one_check:
                keep_java_objects_until_exit()
        except BaseException as error:  # noqa: BLE001 (handed to the caller by result())
            self._error = error

    def wait(self) -> None:
        """Wait until the session has started, or failed to."""
        if self._thread is not None:
            self._thread.join()

    def result(self) -> "SparkSession":
        """The session, once started. Raises what :func:`spark_session`
        raised."""
        self.wait()
        if self._error is not None:
            raise self._error
        assert self._session is not None
        return self._session


def keep_java_objects_until_exit() -> None:
    """Stop telling the JVM, one round trip each, which of its objects this
    process no longer refers to (py4j's memory management, for objects made
    from now on): they stay referenced until the JVM exits. For a process
    that checks once and exits; a long-lived one would keep every query's
    objects. Does nothing before a gateway exists."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.gateway_property.enable_memory_management = False


def _driver_java_options(small_input: bool) -> tuple[str, "_ClassArchiveDump | None"]:
    """The driver JVM's options, and the class archive this JVM must dump
    when it exits (None: it maps an existing one, or does without)."""
    options = [f"-Dlog4j2.configurationFile=file:{LOG4J2_PROPERTIES}"]
    dump = None
    if small_input:
        # A check of a small history lives for seconds: the optimising JIT
        # compiler's work would not pay back, and one GC thread leaves the
        # second core to the job. Its classes' metadata (about 23 MB) stays
        # under the first metaspace threshold: no full collection for it.
        options += ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:MetaspaceSize=64m"]
        archive_options, dump = _class_archive_options(options)
        options += archive_options
    else:
        # A big check is a batch job: the throughput collector (stop the
        # world, no concurrent marking) leaves both cores to the tasks
        # between its pauses. Against the default G1 at ten million
        # operations on local[2]: 246-248 s against 264-286 s, 466 s
        # against 500-541 s of the JVM's and workers' CPU
        # (docs/benchmarks.md, "The throughput collector for big checks").
        options += ["-XX:+UseParallelGC"]
    return " ".join(options), dump


def class_archive_dir() -> Path | None:
    """Where the driver JVM's class data archives are kept (one per Java,
    Spark and set of JVM options; about 150 MB each): the directory
    :data:`CLASS_ARCHIVE_ENV` names, else one in the temporary directory;
    None when that variable is "0"."""
    configured = os.environ.get(CLASS_ARCHIVE_ENV)
    if configured == "0":
        return None
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / "jepsen-like-class-archives"


def _java_identity() -> str:
    # The java spark-submit runs (bin/spark-class: JAVA_HOME, else PATH).
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if java is None:
        return "no java"
    real = os.path.realpath(java)
    try:
        status = os.stat(real)
    except OSError:
        return real
    return f"{real} {status.st_size} {status.st_mtime_ns}"


def _spark_identity() -> str:
    import pyspark

    return f"{pyspark.__version__} {os.path.realpath(os.path.dirname(pyspark.__file__))}"


class _ClassArchiveDump:
    """A class data archive this process's driver JVM writes when it exits
    (``-XX:ArchiveClassesAtExit``): under a private name, renamed into place
    by :meth:`finish` once the JVM has exited, so that no JVM ever maps a
    half-written archive. A lock file keeps concurrent first runs from
    dumping the same archive twice."""

    def __init__(self, archive: Path, lock: Path) -> None:
        self.archive = archive
        self.lock = lock
        self.part = archive.with_name(f"{archive.name}.{os.getpid()}.part")

    def finish(self) -> None:
        """Stop the session and its JVM, wait for the archive, rename it.
        Best effort: without the archive the next run starts the slow way
        and tries again."""
        try:
            from pyspark import SparkContext

            context = SparkContext._active_spark_context
            gateway = SparkContext._gateway
            process = getattr(gateway, "proc", None)
            if context is not None:
                context.stop()
            if process is not None and process.stdin is not None:
                # Spark's gateway server exits (and the JVM dumps the
                # archive) when its stdin closes.
                process.stdin.close()
                process.wait(timeout=_ARCHIVE_DUMP_TIMEOUT_S)
                if self.part.exists() and self.part.stat().st_size > 0:
                    os.replace(self.part, self.archive)
                    prune_class_archives(self.archive.parent, keep=self.archive)
        except Exception:  # noqa: BLE001 (at interpreter exit; the archive is an optimisation)
            pass
        finally:
            self.part.unlink(missing_ok=True)
            self.lock.unlink(missing_ok=True)


def prune_class_archives(directory: Path, keep: Path, kept: int = CLASS_ARCHIVES_KEPT) -> None:
    """Delete all but the ``kept`` newest archives in ``directory`` (never
    ``keep``, the one just written). A JVM mapping one keeps its mapping; a
    JVM asked to map a deleted one starts without it. Never raises."""
    try:
        archives = sorted(directory.glob("spark-driver-*.jsa"), key=lambda path: path.stat().st_mtime, reverse=True)
    except OSError:
        return
    for archive in archives[kept:]:
        if archive != keep:
            archive.unlink(missing_ok=True)


def _class_archive_options(java_options: list[str]) -> tuple[list[str], _ClassArchiveDump | None]:
    """JVM options that map this Java, Spark and option set's class
    archive, or that dump it at exit when there is none yet (and no other
    run is dumping it)."""
    directory = class_archive_dir()
    if directory is None:
        return [], None
    # System properties (-D) do not change which classes load, or how.
    vm_options = [option for option in java_options if not option.startswith("-D")]
    identity = "\n".join([_java_identity(), _spark_identity(), *vm_options])
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    archive = directory / f"spark-driver-{key}.jsa"
    # The archive's own diagnostics (classes it cannot hold, ~400 lines when
    # dumping) are not worth the log file; its errors are.
    quiet = "-Xlog:cds*=error"
    if archive.exists():
        return [f"-XX:SharedArchiveFile={archive}", quiet], None
    lock = archive.with_suffix(".lock")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        os.close(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        try:
            if time.time() - lock.stat().st_mtime > _ARCHIVE_LOCK_STALE_S:
                lock.unlink(missing_ok=True)  # the next run dumps it
        except OSError:
            pass
        return [], None
    except OSError:
        return [], None
    dump = _ClassArchiveDump(archive, lock)
    return [f"-XX:ArchiveClassesAtExit={dump.part}", quiet], dump


def _start_logging_to(log_path: Path, builder: "SparkSession.Builder") -> "SparkSession":
    """``builder.getOrCreate()`` with file descriptors 1 and 2 pointing at
    ``log_path`` while the JVM is launched: the JVM (and every process it
    starts: the Python workers) inherits it as its stdout and stderr. This
    process's are restored before returning."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start_offset = os.fstat(log_fd).st_size
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    try:
        for fd in saved:
            os.dup2(log_fd, fd)
        return builder.getOrCreate()
    except Exception as error:
        condition = getattr(error, "getCondition", getattr(error, "getErrorClass", lambda: None))()
        if condition != "JAVA_GATEWAY_EXITED":
            raise
        # The JVM refused its master, its options or its configuration
        # (input from the user), or Java is missing: say why, from what it
        # printed, instead of PySpark's "gateway process exited".
        raise SparkStartError(
            f"Spark did not start: {_start_failure(log_path, start_offset)} (its output is in {log_path})"
        ) from None
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        os.close(log_fd)


class SparkStartError(RuntimeError):
    """Spark's JVM exited before the session started: a master URL, a
    configuration value or a JVM option it refused, or no usable Java. The
    message quotes the JVM's reason and names the log holding its output."""


# What a JVM that refuses to start prints last: an uncaught exception of
# spark-submit's, or the launcher's own "Error: ..." lines.
_START_FAILURE = re.compile(r'^(?:Exception in thread "main" (?:[\w.$]+\.)?(?P<exception>\S+?): (?P<message>.+)|Error: (?P<error>.+)|(?P<jvm>Invalid .+|Unrecognized .+|Improperly specified .+))$')
_START_FAILURE_GENERAL = ("Could not create the Java Virtual Machine", "A fatal exception has occurred")
# How much of the log's end is read for the reason (a JVM's failure is a
# few lines, under its stack trace).
_START_FAILURE_TAIL_BYTES = 64 * 1024


def _start_failure(log_path: Path, start_offset: int) -> str:
    """The JVM's reason for not starting, from what it wrote to the log
    since ``start_offset`` (its last such line), or a general one."""
    try:
        with open(log_path, "rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(max(start_offset, size - _START_FAILURE_TAIL_BYTES))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        text = ""
    reasons = []
    for line in text.splitlines():
        found = _START_FAILURE.match(line.strip())
        if found is None:
            continue
        if found.group("exception"):
            reasons.append(f"{found.group('exception')}: {found.group('message')}")
        else:
            reasons.append(found.group("error") or found.group("jvm"))
    # The launcher's closing lines say only that the JVM did not start.
    informative = [reason for reason in reasons if not reason.startswith(_START_FAILURE_GENERAL)]
    if informative:
        return informative[-1][:500]
    return reasons[-1][:500] if reasons else "the Java process exited before it was ready"


def _ship_package(session: "SparkSession") -> None:
    context = session.sparkContext
    zip_path = _package_zip()
    shipped = getattr(context, "_jepsen_like_checker_shipped", None)
    if shipped != str(zip_path):
        context.addPyFile(str(zip_path))
        context._jepsen_like_checker_shipped = str(zip_path)  # type: ignore[attr-defined]
