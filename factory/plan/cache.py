"""How large a serving process's model cache is: the recipe's checkpoint, else the model files the tree ships
(a model in the image, whose cache holds only what the hub adds), else the catalog's default."""

from __future__ import annotations

import math
from pathlib import Path

CHECKPOINT = "the checkpoint's size (the recipe's vram_minimum_gb / 1.2)"
TREE_FILES = "the model files in the recipes tree (the image carries the model)"
DEFAULT = "the catalog's default (server.model_cache_default_gb): the recipe gives no size"


def model_cache(weights_gb: float | None, bundled: Path | None, default_gb: float) -> tuple[float, str]:
    """(GB, where that comes from) for a model cache."""
    if bundled is not None:
        size = sum(path.stat().st_size for path in bundled.rglob("*") if path.is_file())
        return round(size / 1e9, 3), TREE_FILES
    if weights_gb is not None:
        return weights_gb, CHECKPOINT
    return default_gb, DEFAULT


# The model cache's room beyond what it holds: the kubelet evicts a pod whose emptyDir outgrows its sizeLimit,
# so a tight one would evict on the tokenizer's and the hub's own files.
CACHE_ROOM = 1.25


def cache_limit_gib(cache_gb: float) -> int:
    """The model cache's size limit in GiB: what it holds, with room, and a GiB more."""
    return math.ceil(cache_gb * 1e9 / 2**30 * CACHE_ROOM) + 1
