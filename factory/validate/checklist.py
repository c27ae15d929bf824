"""The live probes, as objects: each with its name, what it checks, when it applies and its own check.
Validation chooses them from the image's tasks (the recipe's `meta.tasks`: text, multimodal, embedding,
omni) and decides which can run from what the image and this machine offer (offer.Offer); a probe that
cannot run is reported skipped with why."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from factory.engine.progress import Countdown
from factory.plan.runspec import RunSpec
from factory.validate import inside
from factory.validate.container import Started
from factory.validate.offer import Offer, tasks_of
from factory.validate.probes import ProbeFailure, chat, check_models, embeddings, wait_healthy

TEXT_TASKS = frozenset({"text", "multimodal"})


@dataclass(frozen=True)
class Target:
    """What a check runs against: the started container, the name its server answers to, and how long
    /health may take (with where its countdown shows; None: nowhere); the spec it was started from and the
    metric series its deployment's fleet reads (at `metrics_path`)."""

    started: Started
    served: str
    health_timeout_s: float
    progress_to: TextIO | None = None
    spec: RunSpec | None = None
    series: tuple[str, ...] = ()
    metrics_path: str = "/metrics"


@dataclass(frozen=True)
class Outcome:
    """A passed check: what it saw, in words, and how long it took. A failed check raises ProbeFailure."""

    detail: str
    seconds: float = 0.0


Check = Callable[[Target], Outcome]


@dataclass(frozen=True)
class Probe:
    name: str
    checks: str  # what it asserts, in the words a user would check
    when: str  # when it applies, in words
    applies: Callable[[frozenset[str]], bool]
    check: Check | None  # None: no check is written for it yet (chosen, then reported skipped with why)
    gate: bool = False  # the probes after it need it to pass (the server answering at all)


@dataclass(frozen=True)
class Decision:
    probe: Probe
    check: Check | None  # what runs; None: the probe cannot run, for `why`
    why: str = ""


def _health(target: Target) -> Outcome:
    started, out = target.started, target.progress_to
    countdown = (
        Countdown(f"{started.health_url} ({started.name})", target.health_timeout_s, out, out.isatty())
        if out is not None
        else None
    )
    try:
        seconds = wait_healthy(
            started.health_url,
            started.name,
            target.health_timeout_s,
            started.state,
            tick=countdown.tick if countdown else lambda: None,
        )
    finally:
        if countdown is not None:
            countdown.close()
    return Outcome(f"GET {started.health_url} answered 200 after {seconds:.1f} s", seconds)


def _models(target: Target) -> Outcome:
    return Outcome(f"/v1/models lists {check_models(target.started.base_url, target.served)}")


def _chat(target: Target) -> Outcome:
    first = chat(target.started.base_url, target.served)
    return Outcome(
        f"{first.completion_tokens} tokens, finish_reason {first.finish_reason}: {first.text[:80]!r}",
        first.seconds,
    )


def _deterministic(target: Target) -> Outcome:
    first = chat(target.started.base_url, target.served)
    again = chat(target.started.base_url, target.served)
    if again.text != first.text:
        raise ProbeFailure(f"temperature 0 and one seed gave two texts: {first.text!r} then {again.text!r}")
    return Outcome("same text twice at temperature 0 with a fixed seed", first.seconds + again.seconds)


def _started_spec(target: Target) -> RunSpec:
    if target.spec is None:
        raise ProbeFailure("no run spec was given with the container")
    return target.spec


def _non_root(target: Target) -> Outcome:
    return Outcome(inside.check_user(target.started, _started_spec(target)))


def _read_only(target: Target) -> Outcome:
    return Outcome(inside.check_read_only(target.started, _started_spec(target)))


def _metrics(target: Target) -> Outcome:
    return Outcome(inside.check_series(target.started.base_url, target.series, target.metrics_path))


def _embeddings(target: Target) -> Outcome:
    inputs, size = embeddings(target.started.base_url, target.served)
    return Outcome(f"{inputs} inputs, {inputs} vectors of {size} numbers")


PROBES: tuple[Probe, ...] = (
    Probe(
        "live:health",
        "GET /health answers 200 within the start period (fails at once on an exit or a 5xx)",
        "every image",
        lambda tasks: True,
        _health,
        gate=True,
    ),
    Probe(
        "live:models",
        "/v1/models lists the served model's name",
        "every image",
        lambda tasks: True,
        _models,
    ),
    Probe(
        "live:chat",
        "a chat completion with a non-empty choice, a finish_reason and consistent usage",
        "text and multimodal models",
        lambda tasks: bool(tasks & TEXT_TASKS),
        _chat,
    ),
    Probe(
        "live:deterministic",
        "the same chat twice at temperature 0 with a fixed seed gives the same text",
        "text and multimodal models",
        lambda tasks: bool(tasks & TEXT_TASKS),
        _deterministic,
    ),
    Probe(
        "live:non-root",
        "the server inside the running container runs as the image's user, not root (uid 0)",
        "every image",
        lambda tasks: True,
        _non_root,
    ),
    Probe(
        "live:read-only-root",
        "the root filesystem refuses a write, each folder the run spec makes writable takes one",
        "every image",
        lambda tasks: True,
        _read_only,
    ),
    Probe(
        "live:metrics",
        "/metrics serves the series the autoscaler and the endpoint picker read, under the catalog's names",
        "every image",
        lambda tasks: True,
        _metrics,
    ),
    Probe(
        "live:embeddings",
        "POST /v1/embeddings gives one non-empty vector of numbers per input, all of one length",
        "embedding models",
        lambda tasks: "embedding" in tasks,
        _embeddings,
    ),
    Probe(
        "live:image-input",
        "a chat whose message carries an image answers with text",
        "multimodal models",
        lambda tasks: "multimodal" in tasks,
        None,  # no multimodal model is served here to write it against
    ),
    Probe(
        "live:omni-task",
        "the task's endpoint (images, video, speech) answers the recipe's own request",
        "vllm-omni models",
        lambda tasks: "omni" in tasks,
        None,  # vllm-omni needs a GPU: no answer of its endpoints was ever seen here
    ),
)


def chosen(declared: Sequence[str]) -> list[Probe]:
    """The probes for an image of these tasks (the recipe's meta.tasks), in the order they run."""
    tasks = tasks_of(declared)
    return [probe for probe in PROBES if probe.applies(tasks)]


def decide(offer: Offer) -> list[Decision]:
    """Each chosen probe with its check, or with why it cannot run: what the machine and the image offer
    (the vendor's GPUs, a one-node deployment, static checks passed), then whether a check is written."""
    return [_decision(probe, offer) for probe in chosen(sorted(offer.tasks))]


def _decision(probe: Probe, offer: Offer) -> Decision:
    if offer.foreign is not None:
        return Decision(probe, None, offer.foreign)
    if not offer.gpu.available:
        return Decision(probe, None, offer.gpu.why)
    if not offer.one_node:
        return Decision(probe, None, "the image has no one-node deployment to start")
    if not offer.static_passed:
        return Decision(probe, None, "no server started: a static check failed")
    if probe.check is None:
        return Decision(probe, None, f"no check is written yet for {probe.when}")
    return Decision(probe, probe.check)
