"""The optional C extensions (everything else is in pyproject.toml). ``optional=True``: where
one cannot be compiled, rmqinspect installs without it. Without ``_speedups`` the scanner runs
the pure-Python twins in rmqinspect/format/speedups.py; without ``_mapguard`` a store file that
shrinks while it is read can still end the process by SIGBUS (rmqinspect/store/mapguard.py)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rmqinspect.format._speedups",
            sources=["rmqinspect/format/_speedups.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "rmqinspect.store._mapguard",
            sources=["rmqinspect/store/_mapguard.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
