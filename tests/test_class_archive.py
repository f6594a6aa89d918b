"""The Spark driver's class-data-sharing archive: when it is used, written, or left to the
user's own options, and how the archive the JVM wrote at exit is moved into place."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rmqinspect.export.class_archive import archive_options, archive_path, keep_archive


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
    archive = tmp_path / "cache" / "a.jsa"
    options, temporary = archive_options(archive, "")
    assert temporary is not None and temporary.parent == archive.parent
    assert temporary.name.startswith(".") and not temporary.exists()
    assert f"-XX:ArchiveClassesAtExit={temporary}" in options
    archive.write_bytes(b"archive")
    options, temporary = archive_options(archive, "-Dx=1")
    assert temporary is None and f"-XX:SharedArchiveFile={archive}" in options
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/x.jsa", "-XX:ArchiveClassesAtExit=/y"):
        assert archive_options(archive, own) == ([], None)


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


def test_temporaries_of_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    archive = tmp_path / "a.jsa"
    gone = subprocess.Popen(["true"])
    gone.wait()
    abandoned = tmp_path / f".a.jsa.{gone.pid}.tmp"
    alive = subprocess.Popen(["sleep", "30"])
    try:
        running = tmp_path / f".a.jsa.{alive.pid}.tmp"
        for f in (abandoned, running):
            f.write_bytes(b"archive")
        archive_options(archive, "")
        assert not abandoned.exists() and running.exists()
    finally:
        alive.kill()
        alive.wait()
