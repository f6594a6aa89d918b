"""The Spark driver's class-data-sharing archive: when it is used, written, or left to the
user's own options, and how the archive the JVM wrote at exit is moved into place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmqinspect.export.class_archive import archive_options, archive_path, keep_archive
from rmqinspect.export.spark_engine import MIN_JAVA, java_major


def test_the_archive_is_named_after_the_java_build_and_the_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"x" * 10)
    first = archive_path('openjdk version "17.0.15"', jars)
    assert first.parent == tmp_path / "cache" / "rmqinspect" and first.suffix == ".jsa"
    assert archive_path('openjdk version "17.0.15"', jars) == first
    assert archive_path('openjdk version "21.0.1"', jars) != first
    (jars / "spark-core.jar").write_bytes(b"x" * 11)  # another Spark build
    assert archive_path('openjdk version "17.0.15"', jars) != first


def test_options_use_write_or_leave_the_archive(tmp_path: Path) -> None:
    archive = tmp_path / "cache" / "spark-driver-a.jsa"
    options, temporary = archive_options(archive, "", tmp_path)
    assert temporary is not None and temporary.parent == archive.parent
    assert temporary.name.startswith(".") and not temporary.exists()
    assert f"-XX:ArchiveClassesAtExit={temporary}" in options
    archive.write_bytes(b"archive")
    options, temporary = archive_options(archive, "-Dx=1", tmp_path)
    assert temporary is None and f"-XX:SharedArchiveFile={archive}" in options
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/x.jsa", "-XX:ArchiveClassesAtExit=/y"):
        assert archive_options(archive, own, tmp_path) == ([], None)


def test_the_archive_is_kept_only_when_the_jvm_exited_cleanly(tmp_path: Path) -> None:
    archive = tmp_path / "a.jsa"
    temporary = tmp_path / ".a.jsa.1.tmp"
    for exit_code, kept in ((0, True), (3, False)):
        archive.unlink(missing_ok=True)
        temporary.write_bytes(b"archive")
        # Like Spark's gateway: it exits when its standard input ends.
        proc = subprocess.Popen(["sh", "-c", f"cat >/dev/null; exit {exit_code}"], stdin=-1)
        keep_archive(lambda p=proc: p, temporary, archive)  # type: ignore[misc]
        assert proc.returncode == exit_code
        assert archive.exists() is kept and not temporary.exists()
    keep_archive(lambda: None, temporary, tmp_path / "b.jsa")  # no JVM ran: nothing to keep
    assert not (tmp_path / "b.jsa").exists()


def test_the_archive_of_another_install_is_not_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The JVM silently ignores an archive written with the classes at another path.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    paths = []
    for venv in ("a", "b"):
        jars = tmp_path / venv / "jars"
        jars.mkdir(parents=True)
        (jars / "spark-core.jar").write_bytes(b"x" * 10)
        paths.append(archive_path('openjdk version "17.0.15"', jars))
    assert paths[0] != paths[1]


def test_leftovers_of_gone_writers_and_installations_are_removed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    installed, removed = tmp_path / "venv" / "jars", tmp_path / "gone" / "jars"
    installed.mkdir(parents=True)
    archives = {name: cache / f"spark-driver-{name}.jsa" for name in ("kept", "gone", "old")}
    for archive in archives.values():
        archive.write_bytes(b"archive")
    archives["kept"].with_suffix(".jars").write_text(str(installed))
    archives["gone"].with_suffix(".jars").write_text(str(removed))  # its virtualenv was removed
    # archives["old"] has no note: written before archives were keyed on the jars' location
    gone = subprocess.Popen(["true"])
    gone.wait()
    abandoned = cache / f".spark-driver-kept.jsa.{gone.pid}.tmp"
    alive = subprocess.Popen(["sleep", "30"])
    try:
        writing = cache / f".spark-driver-new.jsa.{alive.pid}.tmp"
        for f in (abandoned, writing):
            f.write_bytes(b"archive")
        new = cache / "spark-driver-new.jsa"
        options, temporary = archive_options(new, "", installed)
        assert temporary is not None and f"-XX:ArchiveClassesAtExit={temporary}" in options
        left = sorted(p.name for p in cache.iterdir())
        assert left == sorted(
            [
                writing.name,
                "spark-driver-kept.jsa",
                "spark-driver-kept.jars",
                "spark-driver-new.jars",
            ]
        )
        assert (cache / "spark-driver-new.jars").read_text() == str(installed.resolve())
    finally:
        alive.kill()
        alive.wait()


# The driver's JVM is this process's child (spark-submit execs java): found through /proc, not
# pyspark's private gateway attribute.
MAPPED = """
import os
from pathlib import Path
from rmqinspect.export.spark_engine import spark_context
def children():
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError):
            continue
        if ppid == os.getpid():
            yield stat.parent
with spark_context("local[1]") as sc:
    maps = "".join((child / "maps").read_text() for child in children())
    print(str(Path.cwd() / "cache") in maps)
"""


@pytest.mark.skipif(
    (java_major() or 0) < MIN_JAVA or not Path("/proc/self/maps").exists(),
    reason=f"needs Java {MIN_JAVA}+ and /proc",
)
def test_the_first_driver_writes_the_archive_and_the_next_one_maps_it(tmp_path: Path) -> None:
    # The JVM ignores an archive it cannot use without a word: look at what it mapped.
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    runs = [
        subprocess.run(
            [sys.executable, "-c", MAPPED],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )
        for _ in range(2)
    ]  # fmt: skip
    assert [r.stdout.strip() for r in runs] == ["False", "True"], runs[-1].stderr[-2000:]
    cache = tmp_path / "cache" / "rmqinspect"
    assert [p.suffix for p in sorted(cache.iterdir())] == [".jars", ".jsa"]
