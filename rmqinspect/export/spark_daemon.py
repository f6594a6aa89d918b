"""The Python worker daemon of the spark engine's executors (``spark.python.daemon.module``):
pyspark's own daemon, started after the export's task modules are imported, so the workers it
forks have them already instead of each importing numpy, pyarrow and rmqinspect at its first
task.
"""

import sys
from importlib.machinery import PathFinder
from pathlib import Path


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` without Spark's ``pyspark.zip`` when that zip is the installed pyspark
    package's own copy (pip's pyspark, the usual local case): Spark puts the zip first on its
    workers' path, and modules imported from a zip have no bytecode cache, so the daemon
    compiled pyspark at every start (0.65 s of its start-up against 0.15 s, before the first
    task could run). A zip from another Spark installation stays: it matches its JVM."""
    zips = [p for p in path if Path(p).name == "pyspark.zip"]
    rest = [p for p in path if p not in zips]
    spec = PathFinder.find_spec("pyspark", rest)
    if not zips or spec is None or not spec.submodule_search_locations:
        return path
    package = Path(next(iter(spec.submodule_search_locations))).resolve()
    if all(Path(z).resolve().is_relative_to(package) for z in zips):
        return rest
    return path


if __name__ == "__main__":
    sys.path[:] = prefer_installed_pyspark(sys.path)

    from pyspark import daemon

    import rmqinspect.export.tasks  # noqa: F401  (imported once, for the forked workers)

    daemon.manager()
