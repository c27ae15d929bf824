"""The model folder shipped beside a recipe (`models/<org>/<name>/` next to `<name>.yaml`): checked when the
recipe is read, then listed, hashed and copied, in chunks, by these functions only. Whatever is copied from
it ends in a layer anyone who pulls the image can read, so nothing in it is followed through a link, and
nothing is read past the folder's size limit, however the files changed since the recipe was read."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from factory.base.errors import InputError

# The bundled folder is for a small self-test model: upstream ships none; the factory's tiny model has
# 32 kB. Every generate copies it into the build context (and a 4 GB file there ran out of memory when it
# was read whole, twice), so the whole folder is held to this.
MAX_BUNDLED_BYTES = 64 * 2**20
_CHUNK = 2**20


def _too_big(entry: Path) -> InputError:
    return InputError(
        f"the bundled model folder holds over {MAX_BUNDLED_BYTES:,} bytes: it is for a small self-test "
        "model; serve a real one from the hub or a mounted folder",
        file=entry,
    )


def checked_folder(recipe_file: Path) -> Path | None:
    """The recipe's model folder if it has one, refused with the entry's path for a link, a special file
    or a total over the limit."""
    folder = recipe_file.with_suffix("")
    if folder.is_symlink():
        raise InputError("the bundled model folder is a symlink: refusing to copy through it", file=folder)
    if not folder.is_dir():
        return None
    total = 0
    for parent, folders, files in os.walk(folder):
        for name in [*folders, *files]:
            entry = Path(parent) / name
            info = entry.lstat()
            mode = info.st_mode
            if stat.S_ISLNK(mode):
                raise InputError("a symlink in the bundled model folder: refusing to copy it", file=entry)
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise InputError("not a regular file in the bundled model folder", file=entry)
            total += info.st_size if stat.S_ISREG(mode) else 0
            if total > MAX_BUNDLED_BYTES:
                raise _too_big(entry)
    return folder


def files(folder: Path | None) -> list[tuple[str, Path]]:
    """The folder's regular files by their path inside it, sorted. A link or special file made since the
    recipe was read is left out, never followed (os.walk does not descend into linked folders)."""
    if folder is None or folder.is_symlink() or not folder.is_dir():
        return []
    found = []
    for parent, _, names in os.walk(folder):
        for name in names:
            path = Path(parent) / name
            if stat.S_ISREG(path.lstat().st_mode):
                found.append((path.relative_to(folder).as_posix(), path))
    return sorted(found)


def _open(path: Path) -> int:
    # O_NOFOLLOW: a file swapped for a link since it was listed is refused, not read through.
    return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))


def _chunks(path: Path, budget: int) -> Iterator[bytes]:
    """The file's bytes in chunks, up to `budget` of them and one more (so a file over budget shows)."""
    fd = _open(path)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        taken = 0
        while taken <= budget and (chunk := os.read(fd, min(_CHUNK, budget + 1 - taken))):
            taken += len(chunk)
            yield chunk
    finally:
        os.close(fd)


@dataclass(frozen=True)
class BundledFile:
    """A bundled file as listed (its size then): copied into the build context in chunks, never held whole,
    and never read past its listed size. A file that grew or shrank since is refused, naming it."""

    path: Path
    size: int

    def chunks(self) -> Iterator[bytes]:
        taken = 0
        for chunk in _chunks(self.path, self.size):
            taken += len(chunk)
            if taken > self.size:
                break
            yield chunk
        if taken != self.size:
            raise InputError(
                f"a bundled model file changed while generate ran ({self.size:,} bytes when listed)",
                file=self.path,
                hint="run `factory generate` again once nothing writes to the folder",
            )


def listed(folder: Path | None) -> list[tuple[str, BundledFile]]:
    """Each file with its size, by its path inside the folder; never more than the limit in all."""
    total, found = 0, []
    for name, path in files(folder):
        size = path.lstat().st_size
        total += size
        if total > MAX_BUNDLED_BYTES:
            raise _too_big(path)
        found.append((name, BundledFile(path, size)))
    return found


def add_to_digest(digest: hashlib._Hash, folder: Path | None) -> None:
    """Hash the folder's names and bytes chunk by chunk, under the same limit as the copies."""
    budget = MAX_BUNDLED_BYTES
    for name, path in files(folder):
        digest.update(name.encode() + b"\0")
        for chunk in _chunks(path, budget):
            digest.update(chunk)
            budget -= len(chunk)
        if budget < 0:
            raise _too_big(path)
