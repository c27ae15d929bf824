"""An image's build context, as `factory generate` writes it under images/: the Dockerfile (its template
chosen by the install's kind), the launcher and version check, the locked sets, wheels/ and any model the
recipe ships. Part of planning: the context's hash is the image's identity (factory.plan.hashing)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path, PurePosixPath

from factory.base.errors import InputError
from factory.base.outputs import OutputFile
from factory.base.templating import environment
from factory.plan.models import ImageSpec, image_labels
from factory.recipes import bundled

IMAGE_FILES = ("factory-serve", "image_info.py")


def render_dockerfile(image: ImageSpec, inputs_hash: str) -> str:
    assert image.install is not None
    template = environment().get_template(f"Dockerfile.{image.install.kind}.j2")
    return template.render(image=image, labels=image_labels(image, inputs_hash))


@cache
def image_support_file(name: str) -> bytes:
    """A file copied into each image's build context, with a do-not-edit line after any shebang."""
    text = resources.files("factory").joinpath("image_files", name).read_text(encoding="utf-8")
    shebang, _, rest = text.partition("\n") if text.startswith("#!") else ("", "", text)
    header = f"# DO NOT EDIT: copied by `factory generate` from factory/image_files/{name}.\n"
    return ((shebang + "\n" if shebang else "") + header + rest).encode()


def _mooncake_files(base: PurePosixPath, image: ImageSpec) -> list[OutputFile]:
    """A KV-store image's config launcher (factory.plan.kv: fills a Mooncake config, then runs a process); on
    a vendor image also the Mooncake layer (a pip install's is with its set's files) and what fits it onto
    the image's own packages."""
    install = image.install
    if install is None or not install.mooncake:
        return []
    launcher = "factory-fill-config"
    found = [OutputFile(base / launcher, image_support_file(launcher), executable=True)]
    if install.kind == "vendor-image":
        own = f"# DO NOT EDIT: copied by `factory generate` from the lock (Mooncake {install.mooncake}).\n"
        layer = (own + install.mooncake_requirements).encode()
        found += [
            OutputFile(base / "requirements" / "mooncake.txt", layer),
            OutputFile(base / "fit_layer.py", image_support_file("fit_layer.py")),
        ]
    return found


def image_outputs(image: ImageSpec, inputs_hash: str, model_folder: Path | None) -> list[OutputFile]:
    """The image's build context: Dockerfile, launcher, version check, wheels/ and any bundled model.
    None for an image the factory cannot build (no version yet, no install for its hardware)."""
    if image.install is None:
        return []
    base = image.directory
    dockerfile = render_dockerfile(image, inputs_hash).encode()
    _refuse_long_lines(dockerfile, image)
    files = [
        OutputFile(base / "Dockerfile", dockerfile),
        OutputFile(base / "factory-serve", image_support_file("factory-serve"), executable=True),
        OutputFile(base / "image_info.py", image_support_file("image_info.py")),
        *_requirements(base, image),
        *_mooncake_files(base, image),
        # Local find-links folder for the pip step; a build may put wheels here.
        OutputFile(base / "wheels" / ".keep", b""),
    ]
    files += [OutputFile(base / "model" / name, source=copy) for name, copy in bundled.listed(model_folder)]
    return files


# Docker's Dockerfile parser refuses a line longer than this, in bytes (a recipe's values are limited one
# by one, in characters: several long ones of multi-byte characters still made one CMD line of 86 kB).
DOCKERFILE_LINE_BYTES = 65_535


def _refuse_long_lines(dockerfile: bytes, image: ImageSpec) -> None:
    longest = max(dockerfile.split(b"\n"), key=len)
    if len(longest) > DOCKERFILE_LINE_BYTES:
        raise InputError(
            f"a line of the image's Dockerfile would be {len(longest):,} bytes, and Docker refuses lines "
            f"over {DOCKERFILE_LINE_BYTES:,}: the recipe's values that reach it are too long together",
            file=image.recipe_file,
            field="the image's command and environment",
            value=longest[:60].decode(errors="replace") + "...",
        )


def _requirements(base: PurePosixPath, image: ImageSpec) -> list[OutputFile]:
    """The locked set of a pip install, as the Dockerfile mounts it: uv, torch's layer, then the rest."""
    install = image.install
    if install is None or install.kind != "pip":
        return []
    # What BuildKit keys every layer below vLLM's own on includes uv.txt and those layers' files: their text
    # must not name the vLLM release, or two releases with the same pins below vLLM would share nothing.
    shared = "# DO NOT EDIT: copied by `factory generate` from the lock; not specific to one release.\n"
    named = f"# DO NOT EDIT: copied by `factory generate` from the lock ({install.lock_key}).\n"
    # The Mooncake layer (a KV-store image's) comes after the set's and names its own source: the set's files
    # stay the plain image's byte for byte, so every layer of the plain image is reused.
    mooncake = [(n, t) for n, t in install.layers if n == "mooncake.txt"]
    files = [("uv.txt", install.uv_requirements), *[(n, t) for n, t in install.layers if n != "mooncake.txt"]]
    last = len(files) - 1
    found = [
        OutputFile(base / "requirements" / name, ((named if index == last else shared) + text).encode())
        for index, (name, text) in enumerate(files)
    ]
    own = f"# DO NOT EDIT: copied by `factory generate` from the lock (Mooncake {install.mooncake}).\n"
    return found + [
        OutputFile(base / "requirements" / name, (own + text).encode()) for name, text in mooncake
    ]
