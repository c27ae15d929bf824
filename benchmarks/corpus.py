"""`factory generate` and `factory lock` over a whole recipes tree (the shared corpus).

generate: cold (a new output folder), unchanged (the same folder again: median of 5) and --check, and the
disk's own floor measured in the same rounds: a plain script writing the same files (same paths, sizes and
modes) into a new folder, one after another. This disk is shared and noisy (3 to 30 s of kernel time for the
same cold run, from one time to the next): the cold goal is 10 s, or 1.5x the floor where the floor alone
is over it, the ratio taken round by round.
lock: cold (a new output folder: every release and set asked of the package index and resolved; uv's cache
as the machine has it) and unchanged (again: everything locked, nothing asked).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import Figure

from factory.generate.run import Generated, generate
from factory.generate.scan import begin_scan, on_disk
from factory.project import load_project

ROUNDS = 3
UNCHANGED_RUNS = 5
COLD_GOAL_S, FLOOR_FACTOR, UNCHANGED_GOAL_S = 10.0, 1.5, 1.0
LOCK_COLD_GOAL_S, LOCK_UNCHANGED_GOAL_S = 178.0, 1.0  # as measured before the performance work: kept


def _factory(*args: str) -> float:
    """Seconds a `factory` command takes as a user runs it (its own process)."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "factory", *args], check=True, capture_output=True)
    return time.monotonic() - started


def write_floor(reference: Path, into: Path) -> float:
    """Seconds a plain script takes to write the generated files of `reference` again into `into`: the same
    paths, bytes and modes, read into memory first (only the writing is timed)."""
    files = []
    for relative in on_disk(reference):
        source = reference / relative
        files.append((relative, source.read_bytes(), os.stat(source).st_mode & 0o777))
    made: set[str] = set()
    started = time.monotonic()
    for relative, content, mode in files:
        folder = os.path.dirname(os.path.join(into, relative))
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        with open(os.path.join(into, relative), "wb") as handle:
            handle.write(content)
        os.chmod(os.path.join(into, relative), mode)
    return time.monotonic() - started


def _generate(root: Path, upstream: Path, out: Path, check: bool = False) -> Generated:
    """`factory generate` as the command runs it, in this process: the output folder's scan begins first
    and runs while the project loads (factory.cli)."""
    scanning = begin_scan(out)
    try:
        return generate(load_project(root, upstream, out), check=check, scanning=scanning)
    finally:
        scanning.close()


def generate_figures(root: Path, upstream: Path, lock_folder: Path) -> list[Figure]:
    """generate over the corpus with its lock (`lock_folder`): cold, unchanged, --check; the floor beside."""
    cold, floor, check, unchanged = [], [], [], []
    files = 0
    with tempfile.TemporaryDirectory(prefix="factory-corpus-") as folder:
        for round_number in range(ROUNDS):
            out = Path(folder) / f"out-{round_number}"
            shutil.copytree(lock_folder, out / "lock")
            started = time.monotonic()
            files = _generate(root, upstream, out).files
            cold.append(time.monotonic() - started)
            floor.append(write_floor(out, Path(folder) / f"floor-{round_number}"))
            shutil.rmtree(Path(folder) / f"floor-{round_number}")
            if round_number == 0:
                for _ in range(UNCHANGED_RUNS):
                    started = time.monotonic()
                    _generate(root, upstream, out)
                    unchanged.append(time.monotonic() - started)
            started = time.monotonic()
            _generate(root, upstream, out, check=True)
            check.append(time.monotonic() - started)
            shutil.rmtree(out)
    cold_s, floor_s = statistics.median(cold), statistics.median(floor)
    goal_s = max(COLD_GOAL_S, FLOOR_FACTOR * floor_s)
    ratio = statistics.median(c / f for c, f in zip(cold, floor, strict=True))
    spread = f"{min(cold):.2f}-{max(cold):.2f} s over {ROUNDS} rounds"
    return [
        Figure(
            "generate the corpus: cold",
            round(cold_s, 2),
            "s",
            f"<= {goal_s:.1f} s",
            cold_s <= goal_s,
            f"{files} files ({spread}); the floor {floor_s:.2f} s: {ratio:.2f}x it (median, pairwise); "
            f"goal {COLD_GOAL_S:g} s, or {FLOOR_FACTOR:g}x the floor where that is more",
        ),
        Figure(
            "write the same files, a plain script (the disk's floor)",
            round(floor_s, 2),
            "s",
            "(reported)",
            None,
            f"{min(floor):.2f}-{max(floor):.2f} s over {ROUNDS} rounds",
        ),
        Figure(
            "generate the corpus: unchanged",
            round(statistics.median(unchanged), 2),
            "s",
            f"<= {UNCHANGED_GOAL_S:g} s",
            statistics.median(unchanged) <= UNCHANGED_GOAL_S,
            f"median of {UNCHANGED_RUNS} ({min(unchanged):.2f}-{max(unchanged):.2f} s)",
        ),
        Figure(
            "generate the corpus: --check",
            round(statistics.median(check), 2),
            "s",
            "(reported)",
            None,
            f"{min(check):.2f}-{max(check):.2f} s over {ROUNDS} rounds",
        ),
        Figure("corpus size", files, "files", "> 10,000", files > 10_000, str(upstream)),
    ]


def lock_figures(upstream: Path, out: Path) -> list[Figure]:
    """`factory lock` of the corpus into `out` (new): cold, then unchanged (median of 5). `out/lock` is what
    generate_figures then generates with."""
    cold = _factory("lock", "--recipes", str(upstream), "--out", str(out))
    unchanged = [
        _factory("lock", "--recipes", str(upstream), "--out", str(out)) for _ in range(UNCHANGED_RUNS)
    ]
    again = statistics.median(unchanged)
    return [
        Figure(
            "lock the corpus: cold",
            round(cold, 1),
            "s",
            f"<= {LOCK_COLD_GOAL_S:g} s",
            cold <= LOCK_COLD_GOAL_S,
            "a new output folder: every set asked of the package index (uv's cache as the machine has it)",
        ),
        Figure(
            "lock the corpus: unchanged",
            round(again, 2),
            "s",
            f"<= {LOCK_UNCHANGED_GOAL_S:g} s",
            again <= LOCK_UNCHANGED_GOAL_S,
            f"median of {UNCHANGED_RUNS} ({min(unchanged):.2f}-{max(unchanged):.2f} s): nothing asked",
        ),
    ]
