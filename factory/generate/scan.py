"""The output folder as one run of `factory generate` finds it: every file under the output roots with its
stamp, read in one pass at the start of the run.

An unchanged run over the corpus is mostly this pass (170,000 files): the memory checks each recipe's stamps
against it (factory.generate.memory) and the writer removes what is here and no longer generated
(factory.generate.writer), so the folders are listed once, not once for each. A link is listed as itself,
never followed: the memory takes it as a file that is not intact.

The pass is GNU find's, in a process of its own, started first (`begin_scan`): one `lstat` per file is
kernel time either way, but in Python each also cost a method call and a status object (0.76 s for the
corpus against find's 0.65 s on the other core), and meanwhile this process reads the memory and digests the
recipes' inputs. Where find is missing, is not GNU's or fails (a folder it cannot read), the same pass runs
here, on os.scandir, with the same stamps.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from factory.base.outputs import OUTPUT_ROOTS

# One file's stamp, as text: its type and permission bits, inode, size, modification and change times, e.g.
# "f644:1234:567:1796537201.7542195210:1796537201.7542195210" (GNU find's %y%m:%i:%s:%T@:%C@). Text, so
# a recipe's stamps are compared and digested as they come, never converted (factory.generate.memory).
Stamp = str
FIND_FORMAT = "%p\\0%y%m:%i:%s:%T@:%C@\\0"
# -H (before the roots): a root that is a link is followed, as os.scandir follows it; nothing below it is.
_FIND_FILES = ("-mindepth", "1", "(", "-type", "d", "-o", "-printf", FIND_FORMAT, ")")  # all but folders
_TYPES = {
    stat.S_IFREG: "f",
    stat.S_IFDIR: "d",
    stat.S_IFLNK: "l",
    stat.S_IFIFO: "p",
    stat.S_IFSOCK: "s",
    stat.S_IFBLK: "b",
    stat.S_IFCHR: "c",
}


@dataclass(frozen=True)
class Scan:
    files: dict[str, Stamp]  # path relative to the output folder -> its stamp (a link: its own)
    started_ns: int  # taken before the first folder was listed: a stamp is trusted only from before it


def stamp_of(status: os.stat_result) -> Stamp:
    """The stamp GNU find prints for a file of this status (its times as seconds, nine digits and a 0)."""
    kind = _TYPES.get(stat.S_IFMT(status.st_mode), "U")
    times = [
        f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}0" for ns in (status.st_mtime_ns, status.st_ctime_ns)
    ]
    return f"{kind}{stat.S_IMODE(status.st_mode):o}:{status.st_ino}:{status.st_size}:{times[0]}:{times[1]}"


def is_regular(stamp: Stamp) -> bool:
    return stamp[0] == "f"


def is_executable(stamp: Stamp) -> bool:
    return int(stamp[1 : stamp.index(":")], 8) & 0o100 != 0


def changed_ns(stamp: Stamp) -> int:
    """The change time a stamp holds, in nanoseconds."""
    seconds, _, fraction = stamp.rpartition(":")[2].partition(".")
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


class Scanning:
    """A scan under way: find runs in its own process while the caller goes on; `result` waits for it."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.started_ns = time.time_ns()
        self._process: subprocess.Popen[bytes] | None = None
        self._scan: Scan | None = None
        roots = [root for root in OUTPUT_ROOTS if os.path.isdir(os.path.join(out, root))]
        if not roots:
            return
        # Into an unnamed file, not a pipe: a pipe holds 64 KiB of the corpus's 34 MB listing, and a thread
        # draining it waited for Python's lock each time, so find stalled while this process worked.
        self._listing = tempfile.TemporaryFile(prefix="factory-scan-")  # noqa: SIM115  # closed by _finish or close
        try:
            self._process = subprocess.Popen(
                ["find", "-H", *roots, *_FIND_FILES],
                cwd=out,
                stdout=self._listing,
                stderr=subprocess.DEVNULL,
                env={**os.environ, "LC_ALL": "C"},  # the times' decimal point
            )
        except OSError:  # no find here: scanned in this process instead
            self._listing.close()

    def result(self) -> Scan:
        if self._scan is None:
            self._scan = self._finish()
        return self._scan

    def _finish(self) -> Scan:
        if self._process is None:
            return _scan_here(self.out, self.started_ns)
        with self._listing:
            if self._process.wait() != 0:
                return _scan_here(self.out, self.started_ns)  # not GNU find, or a folder it could not list
            self._listing.seek(0)
            listing = self._listing.read()
        parts = listing.decode(sys.getfilesystemencoding(), "surrogateescape").split("\0")
        pairs = iter(parts[:-1])  # the listing ends with a separator
        return Scan(dict(zip(pairs, pairs, strict=False)), self.started_ns)  # one iterator: pairs

    def close(self) -> None:
        """End find if nobody waited for its scan (the command failed before needing it); drop its listing."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._listing.close()  # (closing it again after result() is harmless)


def begin_scan(out: Path) -> Scanning:
    """Start scanning the output folder; `.result()` gives the Scan."""
    return Scanning(out)


def scan(out: Path) -> Scan:
    """Every file (and link) under the output roots, with its stamp."""
    return begin_scan(out).result()


def _scan_here(out: Path, started_ns: int) -> Scan:
    """The same scan in this process. Written on os.scandir directly: os.walk checks each folder again for
    a link, one more system call for each of the corpus's folders."""
    found: dict[str, Stamp] = {}
    prefix = len(str(out)) + 1
    folders = [os.path.join(out, top) for top in OUTPUT_ROOTS]
    while folders:
        try:
            entries = os.scandir(folders.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue
        with entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                else:
                    try:
                        found[entry.path[prefix:]] = stamp_of(entry.stat(follow_symlinks=False))
                    except FileNotFoundError:  # removed meanwhile
                        continue
    return Scan(found, started_ns)


def on_disk(out: Path) -> list[str]:
    """Every file under the output roots (a link counts as a file), relative to the output folder."""
    return sorted(scan(out).files)
