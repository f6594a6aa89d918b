"""The spark engine's worker daemon imports the installed pyspark package, with its bytecode
caches, instead of the same package's ``pyspark.zip`` that Spark puts first on the path."""

from __future__ import annotations

from pathlib import Path

from rmqinspect.export.spark_daemon import prefer_installed_pyspark


def _installed(site: Path) -> Path:
    """A pyspark package under ``site`` with its own copy of ``pyspark.zip``."""
    package = site / "pyspark"
    (package / "python" / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    zipped = package / "python" / "lib" / "pyspark.zip"
    zipped.write_bytes(b"")
    return zipped


def test_the_installed_packages_own_zip_is_dropped(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zipped = _installed(site)
    path = [str(zipped), str(tmp_path / "py4j-src.zip"), str(site)]
    assert prefer_installed_pyspark(path) == path[1:]


def test_a_zip_of_another_spark_installation_stays(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    _installed(site)
    other = tmp_path / "spark-4.1" / "python" / "lib" / "pyspark.zip"
    path = [str(other), str(site)]
    assert prefer_installed_pyspark(path) == path
    # No installed package at all: the zip is the only pyspark.
    assert prefer_installed_pyspark([str(other)]) == [str(other)]
