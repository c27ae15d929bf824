"""The drift guard inside every image: the installed vLLM must be exactly the locked release."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "factory" / "image_files" / "image_info.py"
spec = importlib.util.spec_from_file_location("image_info", SOURCE)
assert spec and spec.loader
image_info = importlib.util.module_from_spec(spec)
spec.loader.exec_module(image_info)


@pytest.mark.parametrize(
    ("installed", "accepted"),
    [
        ("0.11.2", True),
        ("0.11.2+cpu", True),  # a build's local label
        ("0.11.2+rocm700", True),
        ("0.11.2rc1", False),
        ("0.11.2.dev5", False),
        ("0.11.2.post2", False),
        ("0.11.20", False),
    ],
)
def test_the_drift_guard_accepts_only_the_exact_release(installed: str, accepted: bool) -> None:
    assert (image_info.public(installed) == "0.11.2") is accepted
