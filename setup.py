"""The optional C extension behind the scanner's per-record loops (everything else is in
pyproject.toml). ``optional=True``: where it cannot be compiled, rmqinspect installs without it
and runs the pure-Python twins in rmqinspect/format/speedups.py."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rmqinspect.format._speedups",
            sources=["rmqinspect/format/_speedups.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
