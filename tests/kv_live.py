"""Running a generated Mooncake KV-store deployment on this host for a test: each process from its own compose
file in the start order its header says, the settings as environment (two instances on two loopback
addresses), never an edit of a file; the processes it can kill and start again; what the master says of its
pool (GET :9003/get_all_segments, /get_all_keys, /batch_query_keys, /metrics/summary, the master's admin
API, read in mooncake-transfer-engine-non-cuda 0.3.13.post1 and run here)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from factory.base.tools import compose_binary
from factory.plan.deployment import Deployment
from factory.render import compose
from tests.conftest import TINY

INSTANCE_ADDRESSES = ("127.0.0.1", "127.0.0.2")  # the whole 127/8 is this host's loopback
MASTER_ADMIN = "http://127.0.0.1:9003"  # the master's admin port (the catalog's health check port)


def prompt(tag: str) -> str:
    """A prompt of 420 tokens of the 512 the tiny model takes: three whole 128-token blocks to store."""
    return " ".join(f"{tag}{i} is the number {i}." for i in range(22))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def settings() -> dict[str, str]:
    first, second = INSTANCE_ADDRESSES
    return {
        "MOONCAKE_MASTER_IP": "127.0.0.1",
        "MOONCAKE_STORE_IP": "127.0.0.1",
        "VLLM_INSTANCE_1": first,
        "VLLM_INSTANCE_2": second,
        "ROUTER_HOST": "127.0.0.1",
        "ROUTER_PORT": str(free_port()),
    }


@dataclass
class Started:
    """A deployment whose processes run from their compose files in `folder`."""

    deployment: Deployment
    folder: Path
    settings: dict[str, str]
    env: dict[str, str]

    def compose(self, role: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
        name = compose.file_name(self.deployment, self.role(role))
        return subprocess.run(
            [str(compose_binary()), "-f", name, *args],
            cwd=self.folder, env=self.env, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def role(self, name: str) -> Any:
        return next(role for role in self.deployment.roles if role.name == name)

    def up(self, role: str, wait: bool = True) -> None:
        """Started, and with `wait` answering. A vLLM process or the router is polled at the URL its health
        check asks (Docker runs that check every 30 s, its first 30 s after the start: up to half a minute
        lost per process); the Mooncake processes (checked every 5 s) with `up --wait`."""
        url = self.health_url(role)
        result = self.compose(role, "up", "-d", *(["--wait"] if wait and url is None else []))
        assert result.returncode == 0, f"docker compose up {role}:\n{result.stderr[-3000:]}"
        if wait and url is not None:
            self._answers(role, url)

    def health_url(self, role: str) -> str | None:
        if role == "router":
            return f"http://{self.settings['ROUTER_HOST']}:{self.settings['ROUTER_PORT']}/health"
        if role.startswith("instance-"):
            return f"http://{self.settings['VLLM_INSTANCE_' + role.split('-')[1]]}:8000/health"
        return None

    def _answers(self, role: str, url: str, timeout_s: float = 600) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                if requests.get(url, timeout=5).status_code == 200:
                    return
            state = self.compose(role, "ps", "--all", "--format", "{{.State}}").stdout.strip()
            assert state == "running", f"{role} is {state or 'gone'} before it answered {url}"
            time.sleep(2)
        raise AssertionError(f"{role} did not answer {url} within {timeout_s:.0f} s")

    def kill(self, role: str) -> None:
        """SIGKILL to the process (its container's), as an OOM kill or a lost node would end it."""
        container = self.compose(role, "ps", "-q").stdout.strip()
        assert container, f"{role} is not running"
        subprocess.run(["docker", "kill", "--signal", "KILL", container], check=True, capture_output=True)


@contextlib.contextmanager
def running(
    deployment: Deployment, folder: Path, logs: Path, skip: tuple[str, ...] = ()
) -> Iterator[Started]:
    """The deployment started from its compose files in `folder` (the roles in `skip` left out), process by
    process in its start order; every one taken down after, whatever happened, each one's whole log kept
    in `logs` and its end printed (pytest shows it when the test failed)."""
    chosen = settings()
    started = Started(deployment, folder, chosen, {**os.environ, **chosen})
    up: list[str] = []
    try:
        for role in deployment.roles:
            if role.name in skip:
                continue
            up.append(role.name)
            begun = time.monotonic()
            # Both instances load at once (the first without waiting); the other processes one by one.
            started.up(role.name, wait=role.name != "instance-1")
            if role.name == "instance-2":
                started.up("instance-1")
            print(f"{role.name} up in {time.monotonic() - begun:.0f} s")
        yield started
    finally:
        logs.mkdir(parents=True, exist_ok=True)
        for name in up:
            text = started.compose(name, "logs", "--no-color", "--timestamps", timeout=120)
            (logs / f"{name}.log").write_text(text.stdout + text.stderr, encoding="utf-8")
            tail = [line for line in text.stdout.splitlines() if "Master Admin Metrics" not in line][-60:]
            print(f"--- {name} (whole log: {logs / name}.log)\n" + "\n".join(tail))
        for name in reversed(up):
            started.compose(name, "down", "--timeout", "10", timeout=300)


def counter(host: str, name: str) -> float:
    text = requests.get(f"http://{host}:8000/metrics", timeout=30).text
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}\{{[^}}]*\}} ([0-9.e+]+)$", text, re.M))


def hits(host: str) -> float:
    return counter(host, "vllm:external_prefix_cache_hits_total")


def complete(url: str, text: str) -> tuple[dict[str, Any], float]:
    """A completion of `text` and how long it took; any status but 200 fails the test."""
    begun = time.monotonic()
    payload = {"model": TINY, "prompt": text, "max_tokens": 4, "temperature": 0}
    response = requests.post(f"{url}/v1/completions", json=payload, timeout=300)
    assert response.status_code == 200, f"{url}: {response.status_code} {response.text[:500]}"
    body: dict[str, Any] = response.json()
    return body, time.monotonic() - begun


def segments() -> list[str]:
    """The segments in the master's pool, each named <address>:<port> by the process that gave it."""
    text = requests.get(f"{MASTER_ADMIN}/get_all_segments", timeout=10).text
    return sorted(line.strip() for line in text.splitlines() if line.strip())


def held_by(address: str) -> list[str]:
    return [name for name in segments() if name.rsplit(":", 1)[0] == address]


def stored_keys(more_than: int, timeout_s: float = 60) -> int:
    """The keys in the pool once more than `more_than` are there and every one is written (a key is listed
    from the start of its put; /batch_query_keys answers ok only for a complete replica)."""
    deadline = time.monotonic() + timeout_s
    while True:
        keys = requests.get(f"{MASTER_ADMIN}/get_all_keys", timeout=10).text.split()
        ready = 0
        if len(keys) > more_than:
            found = requests.get(
                f"{MASTER_ADMIN}/batch_query_keys", params={"keys": ",".join(keys)}, timeout=10
            )
            ready = sum(1 for value in (found.json().get("data") or {}).values() if value.get("ok"))
        if (keys and ready == len(keys) and len(keys) > more_than) or time.monotonic() > deadline:
            return ready
        time.sleep(0.5)


def key_count() -> int:
    return len(requests.get(f"{MASTER_ADMIN}/get_all_keys", timeout=10).text.split())


class DropWatch:
    """When the master stopped listing a segment: polled every half second from the moment it starts."""

    def __init__(self, segment: str, timeout_s: float) -> None:
        self.segment, self.timeout_s = segment, timeout_s
        self.began = time.monotonic()
        self.dropped_after: float | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while time.monotonic() - self.began < self.timeout_s:
            with contextlib.suppress(requests.RequestException):
                if self.segment not in segments():
                    self.dropped_after = time.monotonic() - self.began
                    return
            time.sleep(0.5)

    def join(self) -> float | None:
        self._thread.join()
        return self.dropped_after


def one_instance_reads_what_the_other_stored(settings: dict[str, str]) -> dict[str, Any]:
    """A long prompt through the router, then to the instance that did not serve it: external hits."""
    hosts = INSTANCE_ADDRESSES
    served_before = {host: counter(host, "vllm:request_success_total") for host in hosts}
    keys = key_count()
    text = prompt("word")
    routed, _ = complete(f"http://{settings['ROUTER_HOST']}:{settings['ROUTER_PORT']}", text)
    prompt_tokens = routed["usage"]["prompt_tokens"]
    assert prompt_tokens > 256, "longer than the store's blocks, so that whole blocks are stored"
    served = [h for h in hosts if counter(h, "vllm:request_success_total") > served_before[h]]
    assert len(served) == 1, f"the router sent the prompt to one instance: {served}"
    other = next(host for host in hosts if host not in served)
    assert hits(other) == 0
    stored = stored_keys(more_than=keys)  # the serving instance writes its blocks after it answers
    again, _ = complete(f"http://{other}:8000", text)
    assert again["usage"]["prompt_tokens"] == prompt_tokens
    found = hits(other)
    queries = counter(other, "vllm:external_prefix_cache_queries_total")
    record = {"prompt_tokens": prompt_tokens, "served_by": served[0], "other": other, "hits": found,
              "queries": queries, "keys_in_store": stored, "segments": segments()}  # fmt: skip
    print(json.dumps(record))
    assert found > 0, f"the other instance found no block in the store: {record}"
    assert found >= 256, "at least one whole block (the connector's block is 128 tokens, a page's)"
    return record
