"""Runs INSIDE an image (factory validate copies it in, with elf.py and fatbin.py beside it): the machine of
every ELF file in the venv, and the GPU code each named library embeds. FACTORY_BINARIES holds {"venv": the
venv's folder, "machine": the one expected (aarch64), "libraries": paths relative to the venv's
site-packages, "scan": false to read the libraries alone}; prints one line, FACTORY-RESULT and JSON:
{"elf": {"files", "machines", "foreign"}, "libraries": {path: [[code names of one container], ...], [] for
no GPU code, null for no such file}}."""

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factory.validate import elf, fatbin
else:  # inside the image the factory is not installed: elf.py and fatbin.py are copied beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import elf
    import fatbin

asked = json.loads(os.environ["FACTORY_BINARIES"])
venv = Path(asked["venv"])
found = elf.tally(venv, asked["machine"]) if asked.get("scan", True) else elf.Tally()
site = next(venv.glob("lib/python3*/site-packages"))
libraries: dict[str, list[list[str]] | None] = {}
for relative in asked["libraries"]:
    path = site / relative
    if not path.is_file():
        libraries[relative] = None
        continue
    section = fatbin.fatbin_section(path)
    listing = fatbin.Listing.of(section) if section is not None else fatbin.Listing(())
    libraries[relative] = [sorted(code.name for code in codes) for codes in listing.containers]
result = {
    "elf": {
        "files": found.files,
        "machines": dict(found.machines),
        "foreign": found.foreign[:20],
        "cross_target": found.cross_target,
    },
    "libraries": libraries,
}
sys.stdout.write("FACTORY-RESULT " + json.dumps(result) + "\n")
