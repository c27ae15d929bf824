"""Validating the PD router's image as every image is validated (factory.validate.runner): a static check
inside it (the installed vllm-router is the locked release), then the router started with no worker and
probed (it answers its health check, and says it has no worker to route to); the same report, JUnit file
and validation record that `factory publish` trusts."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import requests
from docker.errors import ImageNotFound

from factory.base.errors import DockerError
from factory.base.reporter import Reporter, silent
from factory.blueprint.router import RouterBlueprint
from factory.engine.connect import connect
from factory.engine.leftovers import sweep
from factory.validate.container import running
from factory.validate.probes import ProbeFailure, wait_healthy
from factory.validate.report import HEALTH_MARGIN_S, ValidationReport, write_reports
from factory.validate.static import run_in_image

VERSION = "import importlib.metadata as m; print(m.version('vllm-router'))"


def validate_router(blueprint: RouterBlueprint, reports: Path, note: Reporter = silent) -> ValidationReport:
    image = blueprint.image
    client = connect()
    for name in sweep(client):
        note(f"removed {name}: a container a killed factory run left behind")
    try:
        image_id = str(client.images.get(image.reference).id)
    except ImageNotFound:
        raise DockerError(
            f"{image.reference} is not built on this engine\n  hint: factory build vllm-router"
        ) from None
    report = ValidationReport(
        image.reference, image_id, image.hardware, image.lock.version, image.inputs_hash
    )
    try:
        installed = run_in_image(client, image.reference, ["/opt/router/bin/python", "-c", VERSION], {})
        version = installed.strip().splitlines()[-1]
        report.add("static:router-version", version == image.lock.version, f"installed {version}")
    except RuntimeError as exc:
        report.add("static:run-in-image", False, f"a check could not run inside the image: {exc}")
    if report.passed:
        _live(blueprint, report)
    write_reports(report, reports, f"validate-{image.slug}-{image.tag}")
    return report


def _live(blueprint: RouterBlueprint, report: ValidationReport) -> None:
    spec = blueprint.alone
    report.gpu_probes_run = True  # the live probes the router has: it needs no accelerator
    report.started = f"the router with no worker ({' '.join(str(arg) for arg in spec.args)})"
    cache = Path(tempfile.mkdtemp(prefix="factory-validate-cache-"))
    try:
        with running(spec, uuid.uuid4().hex[:12], cache) as started:
            try:
                budget = (spec.probe.start_period_s if spec.probe else 60) + HEALTH_MARGIN_S
                seconds = wait_healthy(started.health_url, started.name, budget, started.state)
                report.add("live:health", True, f"answered 200 after {seconds:.1f} s", seconds)
            except ProbeFailure as exc:
                report.add("live:health", False, str(exc))
                return
            answer = requests.get(f"{started.base_url}/v1/models", timeout=10)
            routes = answer.status_code == 503 and "no workers" in answer.text.lower()
            said = f"/v1/models with no worker: {answer.status_code} {answer.text[:80]}"
            report.add("live:routes", routes, said)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
