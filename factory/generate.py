"""`factory generate`: render every plan into images/ and compose/, atomically, or check they are current."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath

from factory import __version__
from factory.plan import ComposePlan, ImagePlan
from factory.planner import Plans
from factory.project import Project
from factory.render import (
    render_bake,
    render_compose,
    render_dockerfile,
    render_env_example,
    template_sources,
)

OUTPUT_ROOTS = ("images", "compose")
IMAGE_FILES = ("factory-serve", "image_info.py")


@dataclass(frozen=True)
class OutputFile:
    path: PurePosixPath
    content: bytes
    executable: bool = False


def image_support_file(name: str) -> bytes:
    """A file copied into each image's build context, with a do-not-edit line after any shebang."""
    text = resources.files("factory").joinpath("image_files", name).read_text(encoding="utf-8")
    shebang, _, rest = text.partition("\n") if text.startswith("#!") else ("", "", text)
    header = f"# DO NOT EDIT: copied by `factory generate` from factory/image_files/{name}.\n"
    return ((shebang + "\n" if shebang else "") + header + rest).encode()


def bundled_model_files(project: Project, image: ImagePlan) -> dict[str, bytes]:
    if not image.bundled_model_src:
        return {}
    folder = project.root / image.bundled_model_src
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def with_inputs_hash(project: Project, image: ImagePlan) -> ImagePlan:
    """Hash everything the image is made from: its plan, the templates, the files it copies, the factory."""
    digest = hashlib.sha256(__version__.encode())
    digest.update(image.model_dump_json(exclude={"inputs_hash"}).encode())
    for name, source in template_sources().items():
        digest.update(name.encode() + b"\0" + source.encode())
    for name in IMAGE_FILES:
        digest.update(image_support_file(name))
    for name, content in bundled_model_files(project, image).items():
        digest.update(name.encode() + b"\0" + content)
    return image.model_copy(update={"inputs_hash": digest.hexdigest()})


def image_outputs(project: Project, image: ImagePlan) -> list[OutputFile]:
    base = image.directory
    files = [
        OutputFile(base / "Dockerfile", render_dockerfile(image).encode()),
        OutputFile(base / "factory-serve", image_support_file("factory-serve"), executable=True),
        OutputFile(base / "image_info.py", image_support_file("image_info.py")),
        # Local find-links folder for the pip step; a build may put wheels here.
        OutputFile(base / "wheels" / ".keep", b""),
    ]
    files += [
        OutputFile(base / "model" / name, content)
        for name, content in bundled_model_files(project, image).items()
    ]
    return files


def compose_outputs(plan: ComposePlan) -> list[OutputFile]:
    files = [
        OutputFile(plan.directory / plan.file_name(role), render_compose(plan, index).encode())
        for index, role in enumerate(plan.roles)
    ]
    if plan.settings_used:
        files.append(OutputFile(plan.directory / ".env.example", render_env_example(plan).encode()))
    return files


@dataclass(frozen=True)
class BakeTarget:
    name: str
    context: str
    platform: str
    tags: tuple[str, ...]


def bake_output(images: list[ImagePlan]) -> OutputFile:
    """images/docker-bake.hcl: every image as a buildx target with its platform (arm64 for Grace trays)."""
    targets = [
        BakeTarget(
            name=f"{image.slug}-{image.tag}".replace(".", "-"),
            context=image.directory.as_posix(),
            platform=image.platform,
            tags=(image.reference, f"{image.repository}:{image.immutable_tag}"),
        )
        for image in images
    ]
    groups: dict[str, list[str]] = {}
    for image, target in zip(images, targets, strict=True):
        for group in (image.hardware, image.platform.replace("linux/", "")):
            groups.setdefault(group, []).append(target.name)
    text = render_bake(targets, dict(sorted(groups.items())))
    return OutputFile(PurePosixPath("images/docker-bake.hcl"), text.encode())


def all_outputs(project: Project, plans: Plans) -> list[OutputFile]:
    hashed = {image.reference: with_inputs_hash(project, image) for image in plans.images}
    files = [file for image in hashed.values() for file in image_outputs(project, image)]
    files.append(bake_output(list(hashed.values())))
    for plan in plans.composes:
        files += compose_outputs(plan.model_copy(update={"image": hashed[plan.image.reference]}))
    return files


def write_outputs(root: Path, files: list[OutputFile]) -> None:
    """Write every output root into a new folder, then swap it in: a failure leaves the old output intact,
    and files that are no longer generated disappear."""
    staged: list[tuple[Path, Path]] = []
    try:
        for top in OUTPUT_ROOTS:
            new = root / f".{top}.new-{os.getpid()}"
            shutil.rmtree(new, ignore_errors=True)
            new.mkdir()
            staged.append((new, root / top))
            for file in files:
                if file.path.parts[0] != top:
                    continue
                target = new.joinpath(*file.path.parts[1:])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(file.content)
                target.chmod(0o755 if file.executable else 0o644)
    except BaseException:
        for new, _ in staged:
            shutil.rmtree(new, ignore_errors=True)
        raise
    for new, final in staged:
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        if final.exists():
            final.rename(old)
        new.rename(final)
        shutil.rmtree(old, ignore_errors=True)


def stale_outputs(root: Path, files: list[OutputFile]) -> list[str]:
    """What differs between the generated files and the tree: changed, missing and extra paths."""
    expected = {file.path.as_posix(): file for file in files}
    problems = []
    for path, file in sorted(expected.items()):
        on_disk = root / path
        if not on_disk.is_file():
            problems.append(f"missing: {path}")
        elif on_disk.read_bytes() != file.content:
            problems.append(f"changed: {path}")
        elif bool(on_disk.stat().st_mode & 0o100) != file.executable:
            problems.append(f"mode: {path}")
    for top in OUTPUT_ROOTS:
        for on_disk in sorted((root / top).rglob("*")) if (root / top).is_dir() else []:
            rel = on_disk.relative_to(root).as_posix()
            if on_disk.is_file() and rel not in expected:
                problems.append(f"not generated any more: {rel}")
    return problems
