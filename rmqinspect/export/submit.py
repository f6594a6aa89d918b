"""The export as a ``spark-submit`` application::

    spark-submit --master spark://head:7077 .../rmqinspect/export/submit.py STORE... OUT [options]

It runs ``rmqinspect export STORE... OUT --engine spark [options]`` in the driver spark-submit
started; the master and the Spark settings are spark-submit's (``--master`` is ignored).
"""

import os
import sys

if __name__ == "__main__" and os.path.abspath(sys.path[0]) == os.path.dirname(
    os.path.abspath(__file__)
):
    # Run as a script, this file's directory heads sys.path: drop it so that the package's
    # module names (tables, schema, ...) cannot shadow top-level modules of other libraries.
    del sys.path[0]


def main() -> None:
    from rmqinspect.cli.app import app

    app(["export", *sys.argv[1:], "--engine", "spark"], prog_name="rmqinspect export")


if __name__ == "__main__":
    main()
