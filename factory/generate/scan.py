"""The output folder as one run of `factory generate` finds it: every file under the output roots with its
status, read in one pass at the start of the run.

An unchanged run over the corpus is mostly this pass (170,000 files): the memory checks each remembered
file's stamp against it (factory.generate.memory) and the writer removes what is here and no longer
generated (factory.generate.writer), so the folders are listed once, not once for each. A link is listed as
itself, never followed: the memory takes it as a file that is not intact.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from factory.base.outputs import OUTPUT_ROOTS


@dataclass(frozen=True)
class Scan:
    files: dict[str, os.stat_result]  # path relative to the output folder -> its status (not followed)
    started_ns: int  # taken before the first folder was listed: a stamp is trusted only from before it


def scan(out: Path) -> Scan:
    """Every file (and link) under the output roots, with its status. Written on os.scandir directly:
    os.walk checks each folder again for a link, one more system call for each of the corpus's folders."""
    started = time.time_ns()
    found: dict[str, os.stat_result] = {}
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
                        found[entry.path[prefix:]] = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:  # removed meanwhile
                        continue
    return Scan(found, started)


def on_disk(out: Path) -> list[str]:
    """Every file under the output roots (a link counts as a file), relative to the output folder."""
    return sorted(scan(out).files)
