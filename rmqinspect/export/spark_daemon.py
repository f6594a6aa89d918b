"""The Python worker daemon of the spark engine's executors (``spark.python.daemon.module``):
pyspark's own daemon, started after the export's task modules are imported, so the workers it
forks have them already instead of each importing numpy, pyarrow and rmqinspect at its first
task.
"""

from pyspark import daemon

import rmqinspect.export.tasks  # noqa: F401  (imported once, for the forked workers)

if __name__ == "__main__":
    daemon.manager()
