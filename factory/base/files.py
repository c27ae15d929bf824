"""Writing files so that a reader never sees half of one: write beside it, then rename over it."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """The temporary file is created exclusively and never through a link: a link planted at its name
    (`.name.tmp` -> a file elsewhere) had the run overwrite the file it pointed to."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # whatever is there, a link included, goes (not what a link points to)
    handle = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as written:
            written.write(text)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
