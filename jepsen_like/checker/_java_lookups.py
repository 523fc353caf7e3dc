"""PySpark's Java lookups, cached.

PySpark reaches every SQL function through py4j lookups: ``F.col("x")`` asks
the JVM for the class ``org.apache.spark.sql.functions``, then for its member
``col``, and only then calls it: three round trips to the JVM for one call,
and py4j caches neither answer. Checking a 9,010-operation history made
11,911 round trips, 3,812 of them such lookups, each a Java reflection on
the JVM's side and a wait on this one. Cached, each lookup costs one round trip the first time and none after
(docs/benchmarks.md, "Small histories, a third time").

What is cached: packages and classes by name, and a class's static methods
and nested classes; never a static field's value (it may change), never an
object. The cache lives as long as the JVM view it wraps: a new gateway (a
new JVM) gets a new view from PySpark, and :func:`cache_java_lookups` wraps
that one in turn.
"""

from __future__ import annotations

from typing import Callable

from py4j.java_gateway import JavaClass, JavaMember, JavaPackage, JVMView

_Lookup = Callable[[object, str], object]


def cache_java_lookups() -> None:
    """Swap the JVM view PySpark's functions use (``SparkContext._jvm``,
    and each session's ``_jvm``) for one that caches lookups. Idempotent;
    does nothing before a gateway exists. Never raises."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    view = SparkContext._jvm
    if view is None or isinstance(view, _CachingJVMView):
        return
    cached = _CachingJVMView.wrapping(view)
    SparkContext._jvm = cached
    for session in (SparkSession.getActiveSession(), SparkSession._instantiatedSession):
        if session is not None and getattr(session, "_jvm", None) is view:
            session._jvm = cached


def _caching(found: object) -> object:
    """What py4j answered for a name, as its caching kind."""
    if type(found) is JavaClass:
        return _CachingJavaClass(found._fqn, found._gateway_client)
    if type(found) is JavaPackage:
        return _CachingJavaPackage(found._fqn, found._gateway_client, found._jvm_id)
    return found


def _cached_lookup(owner: object, cache: dict[str, object], lookup: _Lookup, name: str) -> object:
    found = cache.get(name)
    if found is None:
        found = _caching(lookup(owner, name))
        # Two threads may both look a name up the first time: both get
        # equivalent answers, one of them stays.
        if isinstance(found, (JavaMember, JavaClass, JavaPackage)):
            cache[name] = found
    return found


# Subclasses of py4j's own kinds, so that PySpark's isinstance checks see
# what they expect. Names starting with "_" are py4j's or Python's
# attributes, looked up as py4j does, uncached.


class _CachingJVMView(JVMView):
    _lookups: dict[str, object]

    @classmethod
    def wrapping(cls, view: JVMView) -> "_CachingJVMView":
        cached = cls.__new__(cls)
        cached.__dict__.update(view.__dict__)
        cached._lookups = {}
        return cached

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            return JVMView.__getattr__(self, name)
        return _cached_lookup(self, self._lookups, JVMView.__getattr__, name)


class _CachingJavaPackage(JavaPackage):
    def __init__(self, fqn: str, gateway_client: object, jvm_id: str | None = None) -> None:
        super().__init__(fqn, gateway_client, jvm_id)
        self._lookups: dict[str, object] = {}

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            return JavaPackage.__getattr__(self, name)
        return _cached_lookup(self, self._lookups, JavaPackage.__getattr__, name)


class _CachingJavaClass(JavaClass):
    def __init__(self, fqn: str, gateway_client: object) -> None:
        super().__init__(fqn, gateway_client)
        self._lookups: dict[str, object] = {}

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            return JavaClass.__getattr__(self, name)
        return _cached_lookup(self, self._lookups, JavaClass.__getattr__, name)
