"""The `factory` command: parses arguments, calls the package, prints what it returns. It decides nothing."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from factory.base.errors import FactoryError
from factory.base.termination import unwind_on_termination
from factory.cli.parser import build_parser
from factory.generate.scan import Scanning, begin_scan
from factory.project import find_root, load_project


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    unwind_on_termination()
    scanning: Scanning | None = None
    try:
        root = args.root or find_root(Path.cwd())
        if getattr(args, "scans_output", False):  # generate: find lists the output folder while we load
            scanning = args.scanning = begin_scan(getattr(args, "out", None) or root)
        project = load_project(
            root,
            getattr(args, "recipes", None),
            getattr(args, "out", None),
            getattr(args, "lock", None),
            getattr(args, "strict", False),
        )
        result: int = args.func(project, args)
        return result
    except FactoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader stopped reading (`factory renderings --json | head -1`): not a failure to report.
        # stdout goes to /dev/null so the interpreter's last flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a program killed by SIGPIPE, the shell's convention
    except OSError as exc:  # a read-only folder, a full disk, a folder where a file goes: one line
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    finally:
        if scanning is not None:
            scanning.close()
