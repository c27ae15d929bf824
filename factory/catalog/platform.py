"""The CPU platforms images are built for, as Docker and the registries name them, and how uv names each."""

from __future__ import annotations

from typing import Literal

Platform = Literal["linux/amd64", "linux/arm64"]

# uv's target per platform (`--python-platform`): what `factory lock` resolves a set for, and what an image
# installed without emulation installs it for. The newest glibc the images' bases have: linux/arm64 images
# (Grace) build on Debian bookworm (glibc 2.36) or NVIDIA's Ubuntu 22.04 CUDA images (2.35); with
# manylinux_2_28 uv finds no wheel of vLLM 0.20.2 (manylinux_2_35), tilelang or z3-solver (manylinux_2_34)
# and takes their source distributions, which no image can build. linux/amd64 stays at 2_28, as its locked
# sets were made.
PYTHON_PLATFORMS = {"linux/amd64": "x86_64-manylinux_2_28", "linux/arm64": "aarch64-manylinux_2_35"}

# Images of these platforms install their locked set without emulating Python: an install stage on the
# build's own platform ($BUILDPLATFORM) runs uv for the image's platform, and the image's stage copies the
# result in. An arm64 image is mostly built on amd64 hosts (CI runners, this machine), where uv under QEMU
# took 320 s for the vLLM 0.20.2 set and 46 s natively; on an arm64 host the same stage runs natively.
CROSS_INSTALLED = frozenset({"linux/arm64"})
