"""A recipe's `omni` section: vllm-omni serving, one `vllm serve --omni` per task (t2i, i2v, ...)."""

from __future__ import annotations

from typing import Any, Literal

from factory.base.models import Port
from factory.recipes.sections import Flags, Section


class OmniTaskOverride(Section):
    label: str | None = None
    endpoint: str | None = None
    model_id: str | None = None
    description: str | None = None
    extra_args: Flags = []
    curl: str | None = None
    vram_minimum_gb: float | None = None


class OmniTask(Section):
    id: str
    key: str | None = None
    label: str | None = None
    model_id: str | None = None
    vram_minimum_gb: float | None = None
    description: str = ""
    extra_args: Flags = []
    curl: str | None = None
    endpoint: str | None = None
    axes: dict[str, Any] = {}
    hardware_overrides: dict[str, OmniTaskOverride] = {}


class Omni(Section):
    """vllm-omni serving: one `vllm serve --omni` per task (t2i, i2v, ...)."""

    # The two the recipes' SCHEMA.md names. The image's entrypoint serves both with vllm-omni's CLI (the
    # `vllm-omni` console script): `vllm serve --omni` alone reaches it from vLLM 0.20 on only. Any other
    # binary would need another image, so it is refused rather than silently served by vllm-omni.
    serve_binary: Literal["vllm serve", "vllm-omni serve"] | None = None
    port: Port | None = None
    task_label: str | None = None
    task_hint: str | None = None
    tasks: list[str | OmniTask] = []
