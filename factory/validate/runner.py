"""`factory validate`: static checks inside the image, then a real server started and probed."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import docker
from docker.errors import ImageNotFound

from factory.blueprint import Blueprint
from factory.catalog.schema import Vendor
from factory.engine import EngineFacts, connect, engine_facts
from factory.errors import DockerError
from factory.leftovers import sweep
from factory.live import Countdown
from factory.plan.models import Deployment, ImagePlan
from factory.render import compose
from factory.reporter import Reporter, silent
from factory.validate import checklist, static
from factory.validate.container import DIFFERENCES, Started, running
from factory.validate.probes import ProbeFailure, chat, check_models, embeddings, wait_healthy
from factory.validate.report import ValidationReport, write_json, write_junit, write_record

HEALTH_MARGIN_S = 120  # beyond the health check's start period, before validation gives up


@dataclass(frozen=True)
class GpuAccess:
    available: bool
    why: str


def gpu_access(vendor: Vendor, facts: EngineFacts) -> GpuAccess:
    """Whether the engine can give a container this vendor's GPUs, by the check the catalog names."""
    check = vendor.gpu_check
    if check is None:
        return GpuAccess(True, f"{vendor.name}: no GPU needed")
    if check.runtime:
        if check.runtime in facts.runtimes:
            return GpuAccess(True, f"the engine has the {check.runtime} container runtime ({vendor.name})")
        runtimes = ", ".join(facts.runtimes)
        return GpuAccess(
            False,
            f"the engine has no {check.runtime} container runtime for {vendor.name} GPUs"
            f" (runtimes: {runtimes})",
        )
    assert check.device is not None  # the catalog's GpuCheck names a runtime or a device
    local = os.environ.get("DOCKER_HOST", "unix://").startswith("unix://")
    if (local and Path(check.device).exists()) or (
        check.remote_env and os.environ.get(check.remote_env) == "1"
    ):
        return GpuAccess(True, f"{check.device} is present")
    remote = f" (on a remote engine set {check.remote_env}=1)" if check.remote_env else ""
    return GpuAccess(False, f"no {vendor.name} GPU: {check.device} is absent{remote}")


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
    _static_checks(client, image, plans, report)
    access = gpu_access(blueprint.vendor, facts)
    probes = checklist.chosen(image.tasks)
    single = next((plan for plan in plans if plan.nodes == 1), None)
    if not access.available:
        for probe in probes:
            report.skip(probe.name, access.why)
    elif single is None:
        for probe in probes:
            report.skip(probe.name, "the image has no one-node deployment to start")
    elif report.passed:
        for probe in probes:
            if probe.not_run_here:
                report.skip(probe.name, f"not run here: {probe.not_run_here}")
        runnable = {probe.name for probe in probes if not probe.not_run_here}
        timeout_s = health_timeout_s or image.start_period_s + HEALTH_MARGIN_S
        _live_probes(blueprint, single, runnable, report, timeout_s, progress_to)
    stem = f"validate-{image.slug}-{image.tag}"
    write_json(report, reports / f"{stem}.json")
    write_junit(report, reports / f"{stem}.xml")
    if report.passed:
        write_record(report, reports / "validated")
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
            report.add(f"static:{result.name}", result.ok, result.detail)
    except RuntimeError as exc:
        report.add("static:run-in-image", False, f"a check could not run inside the image: {exc}")


def _live_probes(
    blueprint: Blueprint,
    deployment: Deployment,
    runnable: set[str],
    report: ValidationReport,
    timeout_s: float,
    progress_to: TextIO | None,
) -> None:
    image = blueprint.image
    report.gpu_probes_run = True
    spec = deployment.spec(deployment.roles[0])
    report.started = f"{compose.path(deployment, deployment.roles[0])}, as shipped except: " + "; ".join(
        f"{d.field}: {d.what}" for d in DIFFERENCES if d.field != "network"
    )
    cache = Path(tempfile.mkdtemp(prefix="factory-validate-cache-"))
    try:
        with running(spec, uuid.uuid4().hex[:12], cache) as started:
            # The name the server answers to, from the spec it was started with (a recipe's own
            # --served-model-name included), not the model's id.
            served = spec.served_names[0] if spec.served_names else image.served_model_name
            _probe(served, started, runnable, report, timeout_s, progress_to)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _probe(
    served: str,
    started: Started,
    runnable: set[str],
    report: ValidationReport,
    timeout_s: float,
    progress_to: TextIO | None,
) -> None:
    """Health first (every other probe needs a server), then each chosen probe this machine can run."""
    step = "live:health"
    try:
        countdown = (
            Countdown(f"{started.health_url} ({started.name})", timeout_s, progress_to, progress_to.isatty())
            if progress_to is not None
            else None
        )
        try:
            seconds = wait_healthy(
                started.health_url,
                started.name,
                timeout_s,
                started.state,
                tick=countdown.tick if countdown else lambda: None,
            )
        finally:
            if countdown is not None:
                countdown.close()
        report.add(step, True, f"GET {started.health_url} answered 200 after {seconds:.1f} s", seconds)
        step = "live:models"
        if step in runnable:
            models = check_models(started.base_url, served)
            report.add(step, True, f"/v1/models lists {models}")
        step = "live:chat"
        if step in runnable:
            first = chat(started.base_url, served)
            report.add(
                step,
                True,
                f"{first.completion_tokens} tokens, finish_reason {first.finish_reason}: {first.text[:80]!r}",
                first.seconds,
            )
            step = "live:deterministic"
            again = chat(started.base_url, served)
            report.add(
                step,
                again.text == first.text,
                "same text twice at temperature 0 with a fixed seed"
                if again.text == first.text
                else f"temperature 0 and one seed gave two texts: {first.text!r} then {again.text!r}",
            )
        step = "live:embeddings"
        if step in runnable:
            size = embeddings(started.base_url, served)
            report.add(step, True, f"one vector of {size} numbers")
    except ProbeFailure as exc:
        report.add(step, False, str(exc))
    except Exception as exc:  # a network error is a failed probe, not a crash
        report.add(step, False, f"{type(exc).__name__}: {exc}")
