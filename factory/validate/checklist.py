"""The live probes, as objects: each with its name, what it checks, when it applies, and whether this
machine can run it. Validation chooses them from the image's tasks (the recipe's `meta.tasks`: text,
multimodal, embedding, omni); a probe chosen but not runnable here is reported "not run here" with why."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

TEXT_TASKS = frozenset({"text", "multimodal"})


@dataclass(frozen=True)
class Probe:
    name: str
    checks: str  # what it asserts, in the words a user would check
    when: str  # when it applies, in words
    applies: Callable[[frozenset[str]], bool]
    not_run_here: str | None = None  # why this machine cannot run it (None: it runs)


PROBES: tuple[Probe, ...] = (
    Probe(
        "live:health",
        "GET /health answers 200 within the start period (fails at once on an exit or a 5xx)",
        "every image",
        lambda tasks: True,
    ),
    Probe(
        "live:models",
        "/v1/models lists the served model's name",
        "every image",
        lambda tasks: True,
    ),
    Probe(
        "live:chat",
        "a chat completion with a non-empty choice, a finish_reason and consistent usage",
        "text and multimodal models",
        lambda tasks: bool(tasks & TEXT_TASKS),
    ),
    Probe(
        "live:deterministic",
        "the same chat twice at temperature 0 with a fixed seed gives the same text",
        "text and multimodal models",
        lambda tasks: bool(tasks & TEXT_TASKS),
    ),
    Probe(
        "live:embeddings",
        "POST /v1/embeddings gives one non-empty vector of numbers per input",
        "embedding models",
        lambda tasks: "embedding" in tasks,
        "no embedding model this machine's images serve (the CPU target serves the tiny chat model)",
    ),
    Probe(
        "live:image-input",
        "a chat whose message carries an image answers with text",
        "multimodal models",
        lambda tasks: "multimodal" in tasks,
        "no multimodal model this machine's images serve",
    ),
    Probe(
        "live:omni-task",
        "the task's endpoint (images, video, speech) answers the recipe's own request",
        "vllm-omni models",
        lambda tasks: "omni" in tasks,
        "no vllm-omni image can be served here: it needs a CUDA GPU on x86-64 (the catalog's omni refusals)",
    ),
)


def chosen(tasks: Sequence[str]) -> list[Probe]:
    """The probes for an image of these tasks (a recipe that names none is a text model)."""
    found = frozenset(tasks) or frozenset({"text"})
    return [probe for probe in PROBES if probe.applies(found)]
