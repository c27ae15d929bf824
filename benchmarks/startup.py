"""The CPU image's start: from `docker compose up` to a 200 on /health, split into its parts.

The parts come from the container's own clock and vLLM's log lines, as a user would read them:
  container start   `docker compose up` until the engine reports the container started
  imports           until the API server's banner (vLLM printed its version: its modules are imported)
  engine processes  until the worker starts loading the model (the engine core and worker processes
                    started, each importing vLLM again)
  model load        until the engine reports its initialisation (weights, KV cache, warm-up and any
                    torch.compile: "init engine ... took")
  server ready      until the API server listens ("Starting vLLM server on")
  first 200         until /health answers 200
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests
from figures import Figure

from factory.blueprint import Blueprint
from factory.render import compose
from factory.validate.container import running
from factory.validate.probes import chat, wait_healthy

MILESTONES = (
    ("imports", re.compile(r"api_utils.py.*version \d")),
    ("engine processes", re.compile(r"Starting to load model")),
    ("model load", re.compile(r"init engine .* took")),
    ("server ready", re.compile(r"Starting vLLM server on")),
)
PROJECT = "factory-bench-startup"


@dataclass(frozen=True)
class Start:
    parts: dict[str, float]  # seconds per part, in order
    total: float


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _instant(text: str) -> float:
    """Docker's RFC 3339 timestamp (nanoseconds) as seconds since the epoch."""
    stamp = re.sub(r"(\.\d{6})\d*", r"\1", text.strip().replace("Z", "+00:00"))
    return dt.datetime.fromisoformat(stamp).timestamp()


def start_once(compose_file: Path, image: str, timeout_s: float = 300) -> Start:
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="factory-bench-hf-") as cache:
        env = {**os.environ, "FACTORY_IMAGE": image, "API_PORT": str(port), "HF_CACHE": cache}
        compose = ["docker", "compose", "-p", PROJECT, "-f", str(compose_file)]
        began = time.time()
        try:
            subprocess.run([*compose, "up", "-d"], env=env, check=True, capture_output=True)
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{image}: no 200 on /health within {timeout_s:.0f} s")
                time.sleep(0.1)
            healthy = time.time()
            names = subprocess.run(
                [*compose, "ps", "-q"], env=env, check=True, capture_output=True, text=True
            ).stdout.split()
            started = _instant(
                subprocess.run(
                    ["docker", "inspect", "-f", "{{.State.StartedAt}}", names[0]],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )
            logs = subprocess.run(
                ["docker", "logs", "--timestamps", names[0]], check=True, capture_output=True, text=True
            )
        finally:
            subprocess.run([*compose, "down", "-t", "5"], env=env, capture_output=True, check=False)
    parts = {"container start": started - began}
    last = started
    lines = (logs.stdout + logs.stderr).splitlines()
    for name, pattern in MILESTONES:
        at = next((_instant(line.split(" ", 1)[0]) for line in lines if pattern.search(line)), None)
        if at is None:
            raise RuntimeError(f"{image}: no log line for {name} ({pattern.pattern})")
        parts[name] = at - last
        last = at
    parts["first 200"] = healthy - last
    return Start(parts, healthy - began)


def median_start(compose_file: Path, image: str, runs: int = 3) -> Start:
    """The median of each part over `runs` starts (the first start reads the image from disk)."""
    starts = [start_once(compose_file, image) for _ in range(runs)]
    parts = {name: statistics.median(s.parts[name] for s in starts) for name in starts[0].parts}
    return Start(parts, statistics.median(s.total for s in starts))


def startup_figures(plan: Blueprint, out: Path) -> list[Figure]:
    """The image's start from its own compose file (median of 3), part by part, and the probe's overhead."""
    deployment = next(d for d in plan.deployments if d.nodes == 1)
    compose_file = out / compose.path(deployment, deployment.roles[0])
    start = median_start(compose_file, plan.image.reference)
    split = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in start.parts.items())
    figure = Figure(
        "CPU image start: compose up to a 200 on /health",
        round(start.total, 1),
        "s",
        "(reported)",
        None,
        f"median of 3: {split}",
    )
    return [figure, *startup_overhead(plan)]


def startup_overhead(plan: Blueprint) -> tuple[Figure, Figure]:
    """Probe's own overhead: when /health was seen answering, against when vLLM logged it was up."""
    image = plan.image
    deployment = next(d for d in plan.deployments if d.nodes == 1)
    cache = Path(tempfile.mkdtemp(prefix="factory-bench-cache-"))
    with running(deployment.spec(deployment.roles[0]), "bench", cache) as started:
        wrapped = started.container.get_wrapped_container()
        healthy_s = wait_healthy(started.health_url, started.name, 600, started.state, poll_s=0.1)
        seen_at = time.time()
        answer = chat(started.base_url, image.served_model_name)
        logs = wrapped.logs(timestamps=True).decode(errors="replace").splitlines()
    ready = next(line for line in logs if "Application startup complete" in line)
    ready_at = _instant(ready.split(" ", 1)[0])
    overhead = seen_at - ready_at
    return (
        Figure(
            "probe overhead: /health seen after vLLM logged ready",
            round(overhead, 3),
            "s",
            "< 1 s",
            overhead < 1.0,
            f"healthy after {healthy_s:.1f} s from container start",
        ),
        Figure(
            "first chat completion after healthy",
            round(answer.seconds, 3),
            "s",
            "(reported)",
            None,
            f"{answer.completion_tokens} tokens",
        ),
    )
