#!/usr/bin/env python3
"""Inside a vendor image's build: fit a locked layer (the Mooncake wheel and its dependencies, pinned with
hashes) onto the Python environment the vendor's vLLM runs in, without touching the vendor's packages.

    fit_layer.py missing LAYER --python X.Y --record FILE   prints the layer's requirements (pins and hashes)
                                                            of the packages the image lacks; records every
                                                            package the image holds in FILE
    fit_layer.py check LAYER --root NAME --record FILE      after those are installed: each requirement of
                                                            NAME and of what the layer added is met, and no
                                                            package of the image changed

A package the image already holds is kept, at the image's version, whatever the layer pins: what the layer
installs must accept it. When it does not, or the image runs another Python than the layer was locked for,
the step fails with one line naming the package (exit 1).
"""

import argparse
import importlib
import importlib.metadata
import json
import re
import sys
from pathlib import Path
from typing import Any, NoReturn


def _packaging(module: str) -> Any:
    """A module of packaging, or of the copy pip vendors: an image with pip has one or the other."""
    try:
        return importlib.import_module(f"packaging.{module}")
    except ImportError:
        return importlib.import_module(f"pip._vendor.packaging.{module}")


Requirement = _packaging("requirements").Requirement
canonicalize_name = _packaging("utils").canonicalize_name
Version = _packaging("version").Version
PINNED = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)")


def layer_blocks(path: str) -> dict[str, tuple[str, str]]:
    """Each pinned package of a `uv pip compile` file: its name -> (version, its lines with the hashes)."""
    blocks: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        found = PINNED.match(line)
        if found:
            current = canonicalize_name(found["name"])
            blocks[current] = (found["version"], [line])
        elif not line.startswith(" "):
            current = None
        elif current and not line.strip().startswith("#"):  # a hash; uv's `# via` lines are left out
            blocks[current][1].append(line)
    return {name: (version, "\n".join(lines)) for name, (version, lines) in blocks.items()}


def held() -> dict[str, str]:
    """Every distribution the image's python3 sees: name -> version."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist.version)
    return found


def fail(message: str) -> NoReturn:
    print(f"fit_layer: {message}", file=sys.stderr)
    sys.exit(1)


def missing(layer: str, python: str, record: str) -> None:
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running != python:
        fail(f"the image's python3 is Python {running}; the layer {layer} is locked for Python {python}")
    image = held()
    Path(record).write_text(json.dumps(image), encoding="utf-8")
    for name, (_, block) in layer_blocks(layer).items():
        if name not in image:
            print(block)


def check(layer: str, root: str, record: str) -> None:
    before: dict[str, str] = json.loads(Path(record).read_text(encoding="utf-8"))
    now = held()
    for name, version in sorted(before.items()):
        if now.get(name) != version:
            fail(f"{name} {version} of the image became {now.get(name)}: the layer changed a vendor package")
    pins = layer_blocks(layer)
    added = [canonicalize_name(root), *sorted(name for name in pins if name not in before)]
    if added[0] not in now:
        fail(f"{root} is not installed: the layer {layer} does not hold it")
    for parent in added:
        for text in importlib.metadata.requires(parent) or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            name = canonicalize_name(requirement.name)
            found = now.get(name)
            why = f"{parent} {now.get(parent)} requires {requirement}"
            if found is None:
                fail(f"{name} is not installed: {why} (the layer {layer} lacks it)")
            if not requirement.specifier.contains(Version(found), prereleases=True):
                fail(f"{name} {found} in the vendor image does not satisfy it: {why} (the image's is kept)")
    print(f"fit_layer: {len(added)} packages added, {len(before)} of the image kept: " + ", ".join(added))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["missing", "check"])
    parser.add_argument("layer")
    parser.add_argument("--python")
    parser.add_argument("--root")
    parser.add_argument("--record", required=True)
    args = parser.parse_args()
    if args.action == "missing":
        missing(args.layer, args.python, args.record)
    else:
        check(args.layer, args.root, args.record)


if __name__ == "__main__":
    main()
