"""Probes that run themselves: each carries its own check, and whether it runs is decided from what the
image (its tasks, its vendor, its deployments, its static checks) and the machine (its engine's GPU
runtimes) offer. Fast: no engine, no server; the real runs are in test_validate.py."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import pytest

from factory.engine.connect import EngineFacts
from factory.project import Project
from factory.validate import checklist
from factory.validate.checklist import Decision, Outcome, Target
from factory.validate.container import Started
from factory.validate.offer import GpuAccess, Offer, tasks_of
from factory.validate.probes import ProbeFailure
from factory.validate.report import ValidationReport
from factory.validate.runner import run_probes
from tests.conftest import KIMI, TINY, blueprint_of

EMBEDDING = "factory/tiny-random-embedding"
# Engines as `engine_facts` reads them: this machine's (runc only), and one with NVIDIA's runtime.
CPU_ENGINE = EngineFacts("20.10.24", "1.41", "linux/amd64", ("io.containerd.runc.v2", "runc"))
NVIDIA_ENGINE = replace(CPU_ENGINE, runtimes=(*CPU_ENGINE.runtimes, "nvidia"))
RUNS_HERE = GpuAccess(True, "CPU backend: no GPU needed")


# Every image's: the server's user, its read-only root, the fleet's metric series (after the API's).
FLEET = ["live:non-root", "live:read-only-root", "live:metrics"]
CHAT = ["live:health", "live:models", "live:chat", "live:deterministic", *FLEET]
EMBED = ["live:health", "live:models", *FLEET, "live:embeddings"]


def runs(decisions: list[Decision]) -> list[str]:
    return [d.probe.name for d in decisions if d.check is not None]


def skipped(decisions: list[Decision]) -> dict[str, str]:
    return {d.probe.name: d.why for d in decisions if d.check is None}


def test_the_embedding_image_runs_its_embeddings_probe_here_and_no_chat_probe(project: Project) -> None:
    decisions = checklist.decide(Offer.of(blueprint_of(project, EMBEDDING, "cpu"), CPU_ENGINE, True))
    assert runs(decisions) == EMBED
    assert skipped(decisions) == {}


def test_the_tiny_chat_image_runs_the_chat_probes_here_and_not_embeddings(project: Project) -> None:
    decisions = checklist.decide(Offer.of(blueprint_of(project, TINY, "cpu"), CPU_ENGINE, True))
    assert runs(decisions) == CHAT


def test_a_gpu_image_runs_where_the_engine_has_its_vendors_runtime_and_is_skipped_elsewhere(
    project: Project,
) -> None:
    h200 = blueprint_of(project, KIMI, "h200")
    here = checklist.decide(Offer.of(h200, CPU_ENGINE, True))
    assert runs(here) == []
    assert set(skipped(here)) == set(CHAT)
    assert all("no nvidia container runtime for NVIDIA GPUs" in why for why in skipped(here).values())
    there = checklist.decide(Offer.of(h200, NVIDIA_ENGINE, True))
    assert runs(there) == CHAT


def test_an_image_whose_static_checks_failed_starts_no_server(project: Project) -> None:
    decisions = checklist.decide(Offer.of(blueprint_of(project, EMBEDDING, "cpu"), CPU_ENGINE, False))
    assert runs(decisions) == []
    assert set(skipped(decisions).values()) == {"no server started: a static check failed"}


def test_an_image_with_no_one_node_deployment_starts_no_server() -> None:
    decisions = checklist.decide(Offer(frozenset({"text"}), RUNS_HERE, False, True))
    assert runs(decisions) == []
    assert set(skipped(decisions).values()) == {"the image has no one-node deployment to start"}


@pytest.mark.parametrize(
    ("tasks", "run", "no_check"),
    [
        ([], CHAT, []),
        (["text"], CHAT, []),
        (["embedding"], EMBED, []),
        (
            ["multimodal"],
            CHAT,
            ["live:image-input"],
        ),
        (["omni"], ["live:health", "live:models", *FLEET], ["live:omni-task"]),
    ],
)
def test_probes_are_chosen_from_the_recipes_tasks_and_run_where_a_check_is_written(
    tasks: list[str], run: list[str], no_check: list[str]
) -> None:
    """Health first, the order they run in; a chosen probe with no check yet is skipped saying so."""
    decisions = checklist.decide(Offer(tasks_of(tasks), RUNS_HERE, True, True))
    assert runs(decisions) == run
    assert list(skipped(decisions)) == no_check
    assert all(why.startswith("no check is written yet for ") for why in skipped(decisions).values())
    assert all(d.probe.checks and d.probe.when for d in decisions)


def _probe_that(name: str, result: Exception | None) -> Decision:
    """The checklist's probe of this name, its check standing in for a server that answers so."""

    def check(target: Target) -> Outcome:
        if result is not None:
            raise result
        return Outcome(f"{name} answered")

    probe = next(probe for probe in checklist.PROBES if probe.name == name)
    return Decision(replace(probe, check=check), check)


def _report() -> ValidationReport:
    return ValidationReport("image", "sha256:0", "cpu", "0.32.0", "0" * 64)


# Checks that stand in for a server never touch the container.
NO_SERVER = Target(cast(Started, None), "served", 1.0)


def test_a_failed_probe_is_reported_with_its_message_and_the_others_still_run() -> None:
    """(A failed health check, which skips the rest, is run against a real container in test_validate.)"""
    report = _report()
    runnable = [
        _probe_that("live:health", None),
        _probe_that("live:models", ProbeFailure("/v1/models does not list the served model 'x'")),
        _probe_that("live:chat", ConnectionError("connection refused")),
        _probe_that("live:deterministic", None),
    ]
    run_probes(runnable, NO_SERVER, report)
    assert [(c.name, c.status, c.detail) for c in report.cases] == [
        ("live:health", "passed", "live:health answered"),
        ("live:models", "failed", "/v1/models does not list the served model 'x'"),
        ("live:chat", "failed", "ConnectionError: connection refused"),
        ("live:deterministic", "passed", "live:deterministic answered"),
    ]
