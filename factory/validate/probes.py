"""HTTP probes of a vLLM server: /health, /v1/models, a real chat completion and embeddings, each
assertion saying what is wrong in words a user would use."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from factory.base.errors import FactoryError

CHAT_MESSAGE = "Say hello in one short sentence."


class ProbeFailure(FactoryError):
    """The server did not behave as a vLLM server must."""


@dataclass(frozen=True)
class ContainerState:
    running: bool
    exit_code: int | None
    logs_tail: str


@dataclass(frozen=True)
class ChatResult:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float


def wait_healthy(
    url: str,
    name: str,
    timeout_s: float,
    state: Callable[[], ContainerState],
    poll_s: float = 0.5,
    tick: Callable[[], None] = lambda: None,
) -> float:
    """Seconds until GET `url` (the health endpoint) answered 200. Fails at once when the container exits
    or the server answers 5xx (the engine died); while the model loads the port refuses connections, so
    keep waiting."""
    started = time.monotonic()
    last_error = "no answer yet"
    while time.monotonic() - started < timeout_s:
        tick()  # the countdown an operator watches
        current = state()
        if not current.running:
            raise ProbeFailure(
                f"container {name} exited (code {current.exit_code}) before {url} answered;"
                f" its last log lines:\n{current.logs_tail}"
            )
        try:
            response = requests.get(url, timeout=5)
        except requests.RequestException as exc:
            last_error = f"{type(exc).__name__}"
            time.sleep(poll_s)
            continue
        if response.status_code == 200:
            return time.monotonic() - started
        if response.status_code >= 500:
            raise ProbeFailure(
                f"{url} answered {response.status_code}: the engine in {name} is dead;"
                f" its last log lines:\n{state().logs_tail}"
            )
        last_error = f"HTTP {response.status_code}"
        time.sleep(poll_s)
    raise ProbeFailure(
        f"timed out after {timeout_s:.0f} s: {url} of container {name} never answered 200"
        f" (last: {last_error});"
        f" its last log lines:\n{state().logs_tail}"
    )


def check_models(base_url: str, served_name: str) -> list[str]:
    response = requests.get(f"{base_url}/v1/models", timeout=30)
    body = _json(response, "/v1/models")
    ids = [entry.get("id") for entry in body.get("data", []) if isinstance(entry, dict)]
    if served_name not in ids:
        raise ProbeFailure(f"/v1/models does not list the served model {served_name!r}; it lists {ids}")
    return [str(model_id) for model_id in ids]


def chat(base_url: str, model: str, seed: int = 1234, max_tokens: int = 16) -> ChatResult:
    payload = {
        "model": model,
        "messages": [{"role": "user", "content": CHAT_MESSAGE}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": seed,
    }
    started = time.monotonic()
    response = requests.post(f"{base_url}/v1/chat/completions", json=payload, timeout=300)
    seconds = time.monotonic() - started
    return parse_chat(_json(response, "/v1/chat/completions"), seconds)


def embeddings(base_url: str, model: str) -> tuple[int, int]:
    """How many inputs /v1/embeddings was given and the length of each vector it answered: one vector of
    numbers per input, all of one length (the model's width), or a failure saying what came instead."""
    inputs = [CHAT_MESSAGE, "The quick brown fox jumps over the lazy dog."]
    response = requests.post(f"{base_url}/v1/embeddings", json={"model": model, "input": inputs}, timeout=120)
    data = _json(response, "/v1/embeddings").get("data")
    if not isinstance(data, list) or len(data) != len(inputs):
        raise ProbeFailure(
            f"embeddings answer: 'data' is {str(data)[:80]!r}, expected {len(inputs)} entries, one per input"
        )
    sizes = set()
    for index, entry in enumerate(data):
        vector = entry.get("embedding") if isinstance(entry, dict) else None
        if not isinstance(vector, list) or not vector or not all(isinstance(x, (int, float)) for x in vector):
            raise ProbeFailure(
                f"embeddings answer: data[{index}].embedding is {str(vector)[:80]!r}, expected numbers"
            )
        sizes.add(len(vector))
    if len(sizes) != 1:
        raise ProbeFailure(f"embeddings answer: vectors of {sorted(sizes)} numbers, expected one length")
    return len(inputs), sizes.pop()


def parse_chat(body: dict[str, Any], seconds: float = 0.0) -> ChatResult:
    """Check an OpenAI chat completion's shape; every failure names the field and what it held."""
    if body.get("object") != "chat.completion":
        raise ProbeFailure(f"chat answer: 'object' is {body.get('object')!r}, expected 'chat.completion'")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ProbeFailure(f"chat answer: 'choices' is {choices!r}, expected a non-empty list")
    choice = choices[0]
    message = choice.get("message") or {}
    text = message.get("content")
    if not isinstance(text, str) or not text:
        raise ProbeFailure(f"chat answer: choices[0].message.content is {text!r}, expected non-empty text")
    finish_reason = choice.get("finish_reason")
    if not finish_reason:
        raise ProbeFailure(
            f"chat answer: choices[0].finish_reason is {finish_reason!r}, expected e.g. 'stop'"
        )
    usage = body.get("usage") or {}
    prompt, completion, total = (
        usage.get(key) for key in ("prompt_tokens", "completion_tokens", "total_tokens")
    )
    if not all(isinstance(value, int) and value > 0 for value in (prompt, completion, total)):
        raise ProbeFailure(f"chat answer: 'usage' is {usage!r}, expected positive token counts")
    assert isinstance(prompt, int) and isinstance(completion, int)
    if total != prompt + completion:
        raise ProbeFailure(
            f"chat answer: usage.total_tokens {total} != prompt {prompt} + completion {completion}"
        )
    return ChatResult(text, str(finish_reason), prompt, completion, seconds)


def _json(response: requests.Response, what: str) -> dict[str, Any]:
    if response.status_code != 200:
        raise ProbeFailure(f"{what} answered HTTP {response.status_code}: {response.text[:500]}")
    try:
        body = response.json()
    except ValueError:
        raise ProbeFailure(f"{what} answered something that is not JSON: {response.text[:200]!r}") from None
    if not isinstance(body, dict):
        raise ProbeFailure(f"{what} answered {type(body).__name__}, expected a JSON object")
    return body
