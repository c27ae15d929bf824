"""`factory validate`: static checks inside the image, then a real server started and probed."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import TextIO

import docker
from docker.errors import ImageNotFound

from factory.base.errors import DockerError
from factory.base.reporter import Reporter, silent
from factory.blueprint import Blueprint
from factory.engine import emulation
from factory.engine.connect import connect, engine_facts
from factory.engine.leftovers import sweep
from factory.plan.deployment import Deployment
from factory.plan.models import ImagePlan
from factory.render import compose
from factory.validate import binaries, checklist, static
from factory.validate.checklist import Decision, Target
from factory.validate.container import DIFFERENCES, running
from factory.validate.offer import Offer, one_node
from factory.validate.probes import ProbeFailure
from factory.validate.report import HEALTH_MARGIN_S, ValidationReport, write_reports


def validate_image(
    blueprint: Blueprint,
    reports: Path,
    health_timeout_s: float | None = None,
    note: Reporter = silent,
    progress_to: TextIO | None = None,  # where the wait for /health counts down (None: nowhere)
) -> ValidationReport:
    """Static checks of the built image, then (where its GPU is present) a real server probed."""
    image = blueprint.image
    client = connect()
    for name in sweep(client):
        note(f"removed {name}: a container a killed factory run left behind")
    facts = engine_facts(client)
    try:
        image_id = str(client.images.get(image.reference).id)
    except ImageNotFound:
        raise DockerError(
            f"{image.reference} is not built on this engine\n"
            f"  hint: factory build {image.recipe_id} --hardware {image.hardware}"
        ) from None
    report = ValidationReport(
        image.reference, image_id, image.hardware, image.vllm_version or "unresolved", image.inputs_hash
    )
    plans = list(blueprint.deployments)
    if image.platform != facts.platform:
        report.emulated = f"{image.platform} on a {facts.platform} engine (QEMU)"
        why = emulation.missing(image.platform)
        if why is not None:
            report.add("static:run-in-image", False, f"{image.platform} cannot run here: {why}")
    if report.passed or not report.cases:
        _static_checks(client, image, plans, report)
    single = one_node(blueprint)
    decisions = checklist.decide(Offer.of(blueprint, facts, report.passed))
    for decision in decisions:
        if decision.check is None:
            report.skip(decision.probe.name, decision.why)
    runnable = [decision for decision in decisions if decision.check is not None]
    if single is not None and runnable:
        timeout_s = health_timeout_s or image.start_period_s + HEALTH_MARGIN_S
        _live_probes(blueprint, single, runnable, report, timeout_s, progress_to)
    write_reports(report, reports, f"validate-{image.slug}-{image.tag}")
    return report


def _static_checks(
    client: docker.DockerClient, image: ImagePlan, plans: list[Deployment], report: ValidationReport
) -> None:
    try:
        for result in static.check_versions(client, image):
            report.add(f"static:{result.name}", result.ok, result.detail)
        env = static.check_env(client, image)
        report.add(f"static:{env.name}", env.ok, env.detail)
        for result in static.check_serve_args(client, image, static.argv_sets(image, plans)):
            if result.skipped:
                report.skip(f"static:{result.name}", result.detail)
            else:
                report.add(f"static:{result.name}", result.ok, result.detail)
        for result in _binary_checks(client, image):
            report.add(f"static:{result.name}", result.ok, result.detail)
    except RuntimeError as exc:
        report.add("static:run-in-image", False, f"a check could not run inside the image: {exc}")


def _binary_checks(client: docker.DockerClient, image: ImagePlan) -> list[static.CheckResult]:
    """A pip install's venv: every ELF file built for the image's platform; a CUDA image's torch and vLLM
    libraries hold GPU code the hardware runs (binaries.py)."""
    if image.install is None or image.install.kind != "pip":
        return []
    found = binaries.read_binaries(client, image)
    results = [binaries.elf_result(found, image.platform)]
    if image.install.cuda is not None and image.gpu_arch is not None:
        results += binaries.gpu_code_results(found, image.gpu_arch, image.hardware_name)
    return results


def _live_probes(
    blueprint: Blueprint,
    deployment: Deployment,
    runnable: list[Decision],
    report: ValidationReport,
    timeout_s: float,
    progress_to: TextIO | None,
) -> None:
    image = blueprint.image
    report.gpu_probes_run = True
    spec = deployment.spec(deployment.roles[0])
    role = deployment.roles[0]
    shipped = f"the container {compose.path(deployment, role)} ships"
    report.started = f"{deployment.process_name(role)} ({shipped}), as shipped except: " + "; ".join(
        f"{d.field}: {d.what}" for d in DIFFERENCES if d.field != "network"
    )
    cache = Path(tempfile.mkdtemp(prefix="factory-validate-cache-"))
    try:
        with running(spec, uuid.uuid4().hex[:12], cache) as started:
            # The name the server answers to, from the spec it was started with (a recipe's own
            # --served-model-name included), not the model's id.
            served = spec.served_names[0] if spec.served_names else image.served_model_name
            metrics = deployment.fleet.metrics
            series = tuple(metrics.series.model_dump().values())
            target = Target(started, served, timeout_s, progress_to, spec, series, metrics.path)
            run_probes(runnable, target, report)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def run_probes(runnable: list[Decision], target: Target, report: ValidationReport) -> None:
    """Each probe's own check, in the checklist's order (health first: every other probe needs a server).
    A failure is reported with its message; after a failed gate (health) the rest are skipped, saying so."""
    gate_failed: str | None = None
    for decision in runnable:
        name, check = decision.probe.name, decision.check
        assert check is not None  # runnable holds the decisions with a check
        if gate_failed is not None:
            report.skip(name, f"not run: {gate_failed} failed")
            continue
        try:
            outcome = check(target)
        except ProbeFailure as exc:
            report.add(name, False, str(exc))
        except Exception as exc:  # a network error is a failed probe, not a crash
            report.add(name, False, f"{type(exc).__name__}: {exc}")
        else:
            report.add(name, True, outcome.detail, outcome.seconds)
            continue
        if decision.probe.gate:
            gate_failed = name
