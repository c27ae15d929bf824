"""`factory matrix`: how far each model and variant got on each hardware, from the factory's own records:
the plan (generated, skipped and why, not buildable and why), hadolint on the generated Dockerfile, the
engine (built from exactly these inputs), and the validation reports (static checks, live probes on CPU
or GPU). Written as self-contained HTML (no script, no remote resource) and Markdown."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import DockerException

from factory.base.outputs import difference
from factory.base.reporter import Reporter, silent
from factory.base.templating import environment
from factory.base.tools import hadolint_binary
from factory.blueprint import Blueprint, Blueprints
from factory.plan.models import ImagePlan
from factory.report.manifest_records import read_records
from factory.report.matrix_kubernetes import KubernetesCell, kubernetes_cell

# Deepest last; a cell shows the deepest level its records prove.
LEVELS = (
    "skipped",
    "not buildable",
    "generated",
    "linted",
    "built",
    "static checks passed",
    "served on CPU",
    "served on GPU",
)


@dataclass(frozen=True)
class Cell:
    level: str
    detail: str  # the tooltip: why it stops there, or what proved it
    link: str | None = None  # the record behind it, relative to the report folder
    cause: str | None = None  # not buildable: the cause in a word (factory.lockfile.model)

    @property
    def css(self) -> str:
        return self.level.replace(" ", "-")


@dataclass
class Matrix:
    hardware: list[str]
    rows: dict[str, dict[str, Cell]] = field(default_factory=dict)  # "model (variant)" -> hardware -> cell
    kubernetes: dict[str, KubernetesCell] = field(default_factory=dict)  # the manifests column, per row
    kubernetes_records: list[str] = field(default_factory=list)  # the manifest check records read, cited

    def counts(self) -> dict[str, int]:
        found = [cell.level for row in self.rows.values() for cell in row.values()]
        return {level: found.count(level) for level in LEVELS if level in found}

    def causes(self) -> dict[str, int]:
        """How many cells are not buildable, per cause, most first."""
        found = Counter(c.cause or "unknown" for row in self.rows.values() for c in row.values() if c.cause)
        return dict(found.most_common())


class LintCache:
    """hadolint's verdict per Dockerfile content: a file whose bytes did not change is not linted again
    (a corpus has thousands of Dockerfiles, many identical). Kept in the reports folder, and dropped whole
    when the hadolint binary changes."""

    def __init__(self, path: Path, lint: Callable[[Path], str | None], tool: str) -> None:
        self.path, self.lint, self.tool = path, lint, tool
        self.hits = self.runs = 0
        self.verdicts: dict[str, str | None] = {}
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("tool") == tool:
                self.verdicts = data.get("verdicts", {})

    def __call__(self, dockerfile: Path) -> str | None:
        key = hashlib.sha256(dockerfile.read_bytes()).hexdigest()
        if key in self.verdicts:
            self.hits += 1
            return self.verdicts[key]
        self.runs += 1
        self.verdicts[key] = self.lint(dockerfile)
        return self.verdicts[key]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"tool": self.tool, "verdicts": dict(sorted(self.verdicts.items()))}
        self.path.write_text(json.dumps(data, indent=0) + "\n", encoding="utf-8")


def coverage(
    blueprints: Blueprints,
    root: Path,
    reports: Path,
    client: docker.DockerClient | None,
    lint: Callable[[Path], str | None],
    report: Reporter = silent,
) -> Matrix:
    """`reports`: the validation reports, and the records of test runs that checked manifests."""
    hardware: list[str] = []
    records = read_records(reports)
    matrix = Matrix(hardware, kubernetes_records=[record.cite() for record in records])
    by_row: dict[str, list[Blueprint]] = {}
    total, done = len(blueprints.images), 0
    images = engine_images(client)
    for plan in blueprints.recipes:
        for skipped in plan.skipped:
            if skipped.hardware is None:
                continue
            row = matrix.rows.setdefault(f"{skipped.model} ({skipped.variant or 'default'})", {})
            why = f"{skipped.strategy}: {skipped.reason}" if skipped.strategy else skipped.reason
            earlier = row.get(skipped.hardware)
            detail = f"{earlier.detail}\n{why}" if earlier and earlier.level == "skipped" else why
            if earlier is None or earlier.level == "skipped":
                row[skipped.hardware] = Cell("skipped", detail)
            _column(hardware, skipped.hardware)
        for blueprint in plan.images:
            image = blueprint.image
            # a KV-store image (the plain image with Mooncake) has a row of its own
            name = f"{image.model_id} ({image.variant}{', KV store' if blueprint.kv_store else ''})"
            row = matrix.rows.setdefault(name, {})
            row[image.hardware] = _with_passed_over(_cell(blueprint, root, reports, images, lint), image)
            by_row.setdefault(name, []).append(blueprint)
            _column(hardware, image.hardware)
            done += 1
            if done % 250 == 0 or done == total:
                report(f"matrix: {done}/{total} images")
    matrix.kubernetes = {row: kubernetes_cell(found, root, records) for row, found in by_row.items()}
    return matrix


def _column(hardware: list[str], key: str) -> None:
    if key not in hardware:
        hardware.append(key)


def _with_passed_over(cell: Cell, image: ImagePlan) -> Cell:
    """The tooltip also says which newer release the lock passed over for the image, and why."""
    if not image.passed_over:
        return cell
    return dataclasses.replace(cell, detail="\n".join([cell.detail, *image.passed_over]))


def _cell(
    blueprint: Blueprint,
    root: Path,
    reports: Path,
    images: dict[str, tuple[str, str | None]],
    lint: Callable[[Path], str | None],
) -> Cell:
    image = blueprint.image
    if image.install is None:
        cause = image.unbuildable_cause or "unknown"
        return Cell("not buildable", f"{cause}: {image.unbuildable or 'no install'}", cause=cause)
    dockerfile = root / image.directory / "Dockerfile"
    wanted = next((f for f in blueprint.image_files if f.path.name == "Dockerfile"), None)
    if wanted is None or difference(dockerfile, wanted) is not None:
        return Cell("skipped", f"{dockerfile} is missing or stale: run `factory generate`")
    where = f"{image.directory}/Dockerfile"
    problem = lint(dockerfile)
    if problem is not None:
        return Cell("generated", f"{where}: hadolint: {problem}")
    cell = Cell("linted", f"{where}: hadolint finds nothing")
    built = _built_id(images, image.reference, image.inputs_hash)
    if built is None:
        return Cell(cell.level, f"{cell.detail}; no image built from these inputs on this engine")
    cell = Cell("built", f"{image.reference} ({built[:19]}) built from inputs {image.inputs_hash[:12]}")
    record = reports / f"validate-{image.slug}-{image.tag}.json"
    if not record.is_file():
        return cell
    data = json.loads(record.read_text(encoding="utf-8"))
    if data.get("image_id") != built:
        return Cell(cell.level, f"{cell.detail}; {record.name} is about another build")
    cases = data.get("cases", [])
    static = [case for case in cases if case["name"].startswith("static:")]
    live = [case for case in cases if case["name"].startswith("live:")]
    if not static or any(case["status"] == "failed" for case in static):
        failed = [case["name"] for case in static if case["status"] == "failed"]
        return Cell(cell.level, f"{cell.detail}; static checks failed: {', '.join(failed)}", record.name)
    if live and all(case["status"] == "passed" for case in live):
        on = "GPU" if blueprint.vendor.gpu_check is not None else "CPU"
        served = next((c["detail"] for c in live if c["name"] == "live:chat"), "")
        return Cell(
            f"served on {on}", f"live probes passed: /health, /v1/models, chat ({served})", record.name
        )
    why = next((case["detail"] for case in live if case["status"] != "passed"), "no live probe ran")
    if blueprint.vendor.gpu_check is not None and all(case["status"] == "skipped" for case in live):
        # A GPU image on a machine without its GPU (a Grace image on an amd64 host: under emulation).
        where = f", under emulation: {data['emulated']}" if data.get("emulated") else ""
        detail = (
            f"built, checked statically{where}, not run on a GPU ({why}); {len(static)} static checks passed"
        )
        return Cell("static checks passed", detail, record.name)
    return Cell("static checks passed", f"{len(static)} static checks passed; live: {why}", record.name)


def engine_images(client: docker.DockerClient | None) -> dict[str, tuple[str, str | None]]:
    """Every tag on the engine -> (image id, its inputs-hash label), asked once: a corpus has thousands of
    cells, and one request per cell was most of a matrix run whose lint verdicts were all reused."""
    if client is None:
        return {}
    try:
        # The engine's list as it answers it: the SDK's images.list() then asks for each image again, and
        # one another run removes in between failed the whole listing.
        images = client.api.images()
    except DockerException:
        return {}
    return {
        tag: (str(image["Id"]), (image.get("Labels") or {}).get("ai.vllm.factory.inputs-hash"))
        for image in images
        for tag in image.get("RepoTags") or []
        if tag != "<none>:<none>"
    }


def _built_id(images: dict[str, tuple[str, str | None]], reference: str, inputs_hash: str) -> str | None:
    found = images.get(reference) or images.get(f"docker.io/{reference}")
    if found is None or found[1] != inputs_hash:
        return None
    return found[0]


def hadolint_tool() -> str:
    """What identifies the linter's verdicts: its binary's path, size and time."""
    binary = hadolint_binary()
    facts = Path(binary).stat()
    return f"{binary}:{facts.st_size}:{facts.st_mtime_ns}"


def hadolint(dockerfile: Path) -> str | None:
    """None when hadolint finds nothing, else its first finding."""
    result = subprocess.run(
        [str(hadolint_binary()), "--format", "json", str(dockerfile)],
        capture_output=True,
        text=True,
        check=False,
    )
    findings = json.loads(result.stdout or "[]")
    if not findings:
        return None if result.returncode == 0 else result.stderr.strip()[:200]
    first = findings[0]
    return f"{first.get('code')} line {first.get('line')}: {first.get('message')}"


def write_matrix(matrix: Matrix, reports: Path, title: str) -> list[Path]:
    reports.mkdir(parents=True, exist_ok=True)
    context = {
        "matrix": matrix,
        "title": title,
        "levels": LEVELS,
        "counts": matrix.counts(),
        "causes": matrix.causes(),
    }
    written = []
    for name in ("matrix.html", "matrix.md"):
        path = reports / name
        path.write_text(environment().get_template(f"{name}.j2").render(**context), encoding="utf-8")
        written.append(path)
    return written
