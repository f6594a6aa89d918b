"""A class-data-sharing archive of the Spark driver JVM's classes (AppCDS), kept in the user's
cache directory: the JVM then maps Spark's classes instead of loading and verifying them one by
one, which took most of the session's start-up (measured: 8-10 s without, about 3 s with).

The first session without an archive asks its JVM to write one when it exits; the JVM exits
when this process closes its standard input, which :func:`keep_archive` does at exit (after the
export is complete), then moves the archive into place under a name that depends on the Java
build, the Spark jars and where they are, so a changed installation never meets a stale archive
(the JVM also checks, and silently ignores an archive that does not match).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

# Options of the user's that decide class sharing themselves.
USER_SHARING = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit")
# The archive's writer warns about each class it cannot share (old class files in Spark's jars).
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
PREFIX = "spark-driver-"
JARS_NOTE = ".jars"  # next to an archive: the Spark jars' directory it was written for
Jvm = Callable[[], "subprocess.Popen[bytes] | None"]  # the running JVM's process, if any


def archive_path(java_version: str, jars: Path) -> Path:
    """Where the archive for this Java build and these Spark jars is kept. The jars' directory
    is part of the name: the JVM ignores, silently, an archive written with the classes at
    another path (another virtualenv of the same pyspark), and starts without it."""
    digest = hashlib.sha256(java_version.encode())
    digest.update(f"\n{jars.resolve()}".encode())
    for jar in sorted(jars.glob("*.jar")):
        digest.update(f"\n{jar.name}:{jar.stat().st_size}".encode())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "rmqinspect" / f"{PREFIX}{digest.hexdigest()[:16]}.jsa"


def archive_options(archive: Path, user_options: str, jars: Path) -> tuple[list[str], Path | None]:
    """JVM options that use ``archive``, or (when there is none yet) write it at exit to the
    temporary path returned. None of either when the user's options decide class sharing or
    the cache directory cannot be made. Before a new archive is written, the archives of
    Spark installations that are gone (a removed virtualenv) are removed, with the temporaries
    of writers killed before their exit handler ran: each is 70-160 MB."""
    if any(o in user_options for o in USER_SHARING):
        return [], None
    if archive.exists():
        return [f"-XX:SharedArchiveFile={archive}", *QUIET], None
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(archive.parent)
        archive.with_suffix(JARS_NOTE).write_text(str(jars.resolve()))
    except OSError:
        return [], None
    temporary = archive.with_name(f".{archive.name}.{os.getpid()}.tmp")
    return [f"-XX:ArchiveClassesAtExit={temporary}", *QUIET], temporary


def _remove_abandoned(cache: Path) -> None:
    for temporary in cache.glob(f".{PREFIX}*.jsa.*.tmp"):
        pid = temporary.name.removesuffix(".tmp").rpartition(".")[2]
        if pid.isdigit() and not _running(int(pid)):
            temporary.unlink(missing_ok=True)
    for archive in cache.glob(f"{PREFIX}*.jsa"):
        note = archive.with_suffix(JARS_NOTE)
        if not note.exists() or not Path(note.read_text()).is_dir():
            archive.unlink(missing_ok=True)
            note.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def keep_at_exit(jvm: Jvm, temporary: Path, archive: Path) -> None:
    """At exit, end the JVM ``jvm()`` returns and move the archive it wrote into place."""
    atexit.register(keep_archive, jvm, temporary, archive)


def keep_archive(jvm: Jvm, temporary: Path, archive: Path) -> None:
    proc = jvm()
    if proc is not None and proc.stdin is not None:
        proc.stdin.close()  # Spark's gateway exits on end of input, writing the archive
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc is not None and proc.returncode == 0 and temporary.exists():
        os.replace(temporary, archive)
    else:
        temporary.unlink(missing_ok=True)
