"""Writing generated files into the output folder, and comparing them with what is there.

A file whose bytes and mode are already right is left alone; others are written beside their place and
renamed over it (a reader never sees half a file, a failure leaves no temporary file); files no longer
generated are removed, empty folders with them. Every path is checked to stay inside the output folder,
under an output root, before any file handed over with it is written.

The writing happens in a thread of its own (OutputWriter): `generate` hands over each recipe's files as
soon as it is planned and plans the next one meanwhile. Creating 45,000 files and 30,000 folders is
system calls, which run without Python's lock, so on a second core they overlap the planning instead of
following it (on this file system they cost from 3 to 30 s of kernel time from one run to the next).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from types import TracebackType

from factory.base.errors import InputError
from factory.base.outputs import OUTPUT_ROOTS, OutputFile, same
from factory.generate.scan import scan


def target(out: Path, path: PurePosixPath) -> Path:
    """Where a generated file goes: always inside the output folder, under images/ or compose/. The path is
    checked as text (relative, no `..`, no empty or dot-only part, an output root first), which needs no
    file system call: the folders under the roots are the factory's own."""
    parts = path.parts
    if (
        path.is_absolute()
        or len(parts) < 2
        or parts[0] not in OUTPUT_ROOTS
        or any(part in ("", ".", "..") or "\0" in part for part in parts)
    ):
        raise InputError("a generated path would land outside the output folder", value=str(path), file=out)
    return out / path


def write_outputs(
    out: Path, files: list[OutputFile], keep: Iterable[str] = (), present: Iterable[str] | None = None
) -> int:
    """Write what changed and remove what is no longer generated (paths in `keep` aside); returns how many
    files were written. `present`: what was on disk before (factory.generate.scan), scanned if not given."""
    with OutputWriter(out) as writer:
        writer.put(files)
    remove_extra(out, {file.path.as_posix() for file in files} | set(keep), present)
    return writer.written


class OutputWriter:
    """Writes the files handed to `put` in a thread of its own, in order; leaving the `with` block waits for
    them. Each batch's paths are checked before it is handed over; the first failure stops the writing and
    is raised when the block ends (or by the next `put`)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.written = 0
        self._batches: queue.SimpleQueue[list[tuple[OutputFile, Path]] | None] = queue.SimpleQueue()
        self._failure: BaseException | None = None
        self._linkless: set[PurePosixPath] = set()  # folders checked not to be links
        self._folders: set[str] = set()  # folders known to exist (made or found by the thread)
        self._thread = threading.Thread(target=self._run, name="factory-writer", daemon=True)

    def __enter__(self) -> OutputWriter:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._batches.put(None)
        self._thread.join()
        if self._failure is not None and error is None:
            raise self._failure

    def put(self, files: list[OutputFile]) -> None:
        """Check every path of `files`, then hand them to the thread."""
        if self._failure is not None:
            raise self._failure
        targets = [(file, target(self.out, file.path)) for file in files]
        _refuse_links(self.out, [file.path for file in files], self._linkless)
        self._batches.put(targets)

    def _run(self) -> None:
        while (batch := self._batches.get()) is not None:
            if self._failure is not None:
                continue  # drain: the caller learns of the failure at its next put or at the end
            try:
                for file, path in batch:
                    if same(path, file):
                        continue
                    self._make_folder(os.path.dirname(path))
                    _replace_atomically(path, file)
                    self.written += 1
            except BaseException as exc:  # handed to the caller's thread, raised there
                self._failure = exc

    def _make_folder(self, folder: str) -> None:
        """Create `folder` (and its missing parents), one system call for each folder a cold run makes:
        the parent was made just before, or is known to exist."""
        if folder in self._folders:
            return
        try:
            os.mkdir(folder)
        except FileExistsError:
            pass  # a file in its place fails the write that follows, naming it
        except FileNotFoundError:
            self._make_folder(os.path.dirname(folder))
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder)
        self._folders.add(folder)


def _refuse_links(out: Path, paths: list[PurePosixPath], checked: set[PurePosixPath]) -> None:
    """No folder between the output folder and a generated file may be a link: `images/<slug>` pointing
    elsewhere once had generate write 15 files outside the project. (The output folder itself is the
    user's choice; a generated file that is a link is replaced, not written through, by the rename.)
    `checked`: the folders already found not to be links, added to."""
    for path in paths:
        for folder in reversed(path.parents[:-1]):  # images, images/<slug>, ... (not the output folder)
            if folder in checked:
                continue
            if os.path.islink(os.path.join(out, folder)):
                raise InputError(
                    "a folder under the output folder is a symlink: refusing to write through it",
                    file=out / folder,
                    hint="remove the link; generate makes the folder itself",
                )
            checked.add(folder)


def _replace_atomically(path: Path, file: OutputFile) -> None:
    """Replace a file by writing beside it and renaming over it: a reader sees the old file or the new one,
    never half. A file that does not exist yet is created in place (nothing to see half of), which saves a
    rename per file on a cold run; on any failure the partial file is removed either way."""
    mode = 0o755 if file.executable else 0o644
    try:
        _write_new(str(path), file, mode)
        return
    except FileExistsError:
        pass
    temporary = f"{path.parent}/.{path.name}.{os.getpid()}.tmp"
    _write_new(temporary, file, mode)
    try:
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _write_new(path: str, file: OutputFile, mode: int) -> None:
    """Create `path` (it must not exist) with the file's bytes, chunk by chunk (a bundled model file is
    copied, never held whole); remove it again if anything fails."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            for chunk in file.chunks():
                view = memoryview(chunk)
                while view:
                    view = view[os.write(handle, view) :]
            os.fchmod(handle, mode)  # the umask may have narrowed it
        finally:
            os.close(handle)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def remove_extra(out: Path, expected: set[str], present: Iterable[str] | None = None) -> None:
    """Remove every file under the output roots that is not expected, then the folders that emptied.
    `present` lists the files found before this run wrote any: a file it wrote is expected."""
    emptied: set[str] = set()
    for path in scan(out).files if present is None else present:
        if path not in expected:
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                os.unlink(os.path.join(out, path))
            emptied.add(os.path.dirname(path))
    for folder in sorted(emptied, key=len, reverse=True):  # deepest first, so parents empty in turn
        while folder and folder not in OUTPUT_ROOTS:
            try:
                os.rmdir(os.path.join(out, folder))
            except OSError:  # not empty: neither are its parents
                break
            folder = os.path.dirname(folder)
