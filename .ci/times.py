#!/usr/bin/env python3
"""The wall time of each part of a CI run, against its budget (.ci/parts.toml).

  times.py record PART SECONDS   add a part's time to the run's record ($FACTORY_CI_TIMES; nothing without it)
  times.py go MODULE SECONDS     add a Go module's build time to the part that lists it
  times.py cold WHY              mark the run cold (a Go tool or a base image built from nothing), saying why
  times.py report [--history F]  print every part against its warm or cold budget, the total against the
                                 limits, and add the run to the history file (one JSON line per run)

Standard library only: it runs before the project's venv exists. The record is a JSON line per event, so the
processes of a run (testbench/up, nox, pytest) each append to it without coordinating.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tomllib
from pathlib import Path

PARTS = Path(__file__).with_name("parts.toml")
HISTORY = Path(os.environ.get("FACTORY_TESTBENCH_STATE", "/var/lib/factory-testbench")) / "ci-history.jsonl"


def load_parts() -> dict[str, object]:
    return tomllib.loads(PARTS.read_text(encoding="utf-8"))


def part_of_module(module: str) -> str:
    """The part a test module's time counts to ("tests: other" for one not listed)."""
    for part in load_parts()["part"]:  # type: ignore[attr-defined]
        if module in part.get("modules", []):
            return str(part["name"])
    return "tests: other"


def late_modules() -> set[str]:
    """The test modules of the parts marked `late` (they need tools built from Go modules)."""
    parts = load_parts()["part"]  # type: ignore[attr-defined]
    return {module for part in parts if part.get("late") for module in part.get("modules", [])}


def part_of_go_module(module: str) -> str:
    """The part a Go module's build counts to ("test setup" for one not listed)."""
    for part in load_parts()["part"]:  # type: ignore[attr-defined]
        if module in part.get("go_modules", []):
            return str(part["name"])
    return "test setup"


def append(event: dict[str, object]) -> None:
    record = os.environ.get("FACTORY_CI_TIMES")
    if not record:
        return
    # one short line per write: the processes' appends do not interleave
    with Path(record).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(event) + "\n")


def read(record: Path) -> tuple[dict[str, float], list[str]]:
    seconds: dict[str, float] = {}
    cold: list[str] = []
    for line in record.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if "cold" in event:
            cold.append(str(event["cold"]))
        else:
            seconds[event["part"]] = seconds.get(event["part"], 0.0) + float(event["seconds"])
    return seconds, cold


def minutes(value: float) -> str:
    whole = round(value)
    return f"{whole // 60}:{whole % 60:02d}"


def report(record: Path, history: Path) -> int:
    seconds, cold = read(record)
    config = load_parts()
    kind = "cold" if cold else "warm"
    budgets = {str(p["name"]): float(p[kind]) * 60 for p in config["part"]}  # type: ignore[attr-defined]
    limit = float(config["limits"][kind]) * 60  # type: ignore[index]
    rows = [f"CI parts ({kind} run{': ' + '; '.join(cold) if cold else ''}):"]
    rows.append(f"  {'part':<28} {'took':>7} {'budget':>7}")
    over = []
    for name in [*budgets, *sorted(set(seconds) - set(budgets))]:
        if name not in seconds and name not in budgets:
            continue
        took, budget = seconds.get(name), budgets.get(name)
        mark = ""
        if took is not None and budget is not None and took > budget:
            mark = "  OVER BUDGET"
            over.append(name)
        rows.append(
            f"  {name:<28} {minutes(took) if took is not None else '-':>7}"
            f" {minutes(budget) if budget is not None else '-':>7}{mark}"
        )
    total = sum(seconds.values())
    started = os.environ.get("FACTORY_CI_STARTED")
    wall = time.time() - float(started) if started else total  # the parts plus what lies between them
    rows.append(f"  {'sum of the parts':<28} {minutes(total):>7}")
    rows.append(
        f"  {'the whole run':<28} {minutes(wall):>7} {minutes(limit):>7}{'  OVER' if wall > limit else ''}"
    )
    print("\n".join(rows))
    if over:
        print(f"over budget: {', '.join(over)} (a fault of that part's work)")
    entry = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "kind": kind, "cold": cold}
    entry |= {"commit": os.environ.get("FACTORY_CI_COMMIT", ""), "total_s": round(wall), "parts": seconds}
    try:
        history.parent.mkdir(parents=True, exist_ok=True)
        with history.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
    except OSError as exc:
        print(f"the history could not be written ({history}: {exc})", file=sys.stderr)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("part")
    rec.add_argument("seconds", type=float)
    go = sub.add_parser("go")
    go.add_argument("module")
    go.add_argument("seconds", type=float)
    why = sub.add_parser("cold")
    why.add_argument("why")
    rep = sub.add_parser("report")
    rep.add_argument("--history", type=Path, default=HISTORY)
    args = parser.parse_args()
    if args.command == "record":
        append({"part": args.part, "seconds": round(args.seconds, 1)})
    elif args.command == "go":
        append({"part": part_of_go_module(args.module), "seconds": round(args.seconds, 1)})
    elif args.command == "cold":
        append({"cold": args.why})
    else:
        record = os.environ.get("FACTORY_CI_TIMES")
        if not record or not Path(record).exists():
            print("no CI times recorded", file=sys.stderr)
            return 0
        return report(Path(record), args.history)
    return 0


if __name__ == "__main__":
    sys.exit(main())
