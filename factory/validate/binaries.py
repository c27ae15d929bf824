"""Static checks of the binaries an image holds, for images no machine here can run natively or on a GPU
(Grace: linux/arm64 CUDA images): every ELF file in the venv is built for the image's platform, and the torch
and vLLM libraries embed GPU code the hardware's compute capability runs, by CUDA's rules (fatbin.py), read
from the libraries themselves. Run inside the image (check_binaries.py; under QEMU for another platform)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import docker

from factory.base import image_paths
from factory.plan.models import ImagePlan
from factory.validate.elf import GPU_CODE, PLATFORM_MACHINES
from factory.validate.fatbin import GpuCode, capability
from factory.validate.static import CheckResult, run_in_image

# The libraries whose GPU code is checked (relative to site-packages), and what must hold of them: torch
# builds each of its kernels for every architecture it targets, so every container must hold code the GPU
# runs; vLLM's _C also carries kernels written for one architecture only (sm_90a Hopper GEMMs), so it must
# hold code the GPU runs, and the containers without any are counted, not failed.
GPU_LIBRARIES = {"torch/lib/libtorch_cuda.so": "every", "vllm/_C.abi3.so": "some"}
SHIPPED = ("check_binaries.py", "elf.py", "fatbin.py")  # what validation copies into the container


@dataclass(frozen=True)
class Binaries:
    """What check_binaries.py read inside the image."""

    files: int
    machines: dict[str, int]
    foreign: list[str]
    cross_target: int  # files of another machine in a folder named by its target triple (for cross-linking)
    libraries: dict[str, list[list[str]] | None]  # per library its containers' code names; None: absent


def read_binaries(client: docker.DockerClient, image: ImagePlan, scan: bool = True) -> Binaries:
    """What the image holds: every ELF file of its venv by machine (`scan`), and the GPU code of the checked
    libraries (a CUDA image's)."""
    machine = PLATFORM_MACHINES[image.platform]
    cuda = image.install is not None and image.install.cuda is not None
    libraries = list(GPU_LIBRARIES) if cuda else []
    asked = {"venv": image_paths.VENV, "machine": machine, "libraries": libraries, "scan": scan}
    package = resources.files("factory.validate")
    files = {name: package.joinpath(name).read_bytes() for name in SHIPPED}
    command = ["python3", f"{image_paths.CHECKS}/check_binaries.py"]
    output = run_in_image(client, image.reference, command, {"FACTORY_BINARIES": json.dumps(asked)}, files)
    line = next(line for line in output.splitlines() if line.startswith("FACTORY-RESULT "))
    found = json.loads(line.removeprefix("FACTORY-RESULT "))
    elf = found["elf"]
    return Binaries(
        elf["files"], elf["machines"], elf["foreign"], elf.get("cross_target", 0), found["libraries"]
    )


def elf_result(binaries: Binaries, platform: str) -> CheckResult:
    machine = PLATFORM_MACHINES[platform]
    cubins = binaries.machines.get(GPU_CODE, 0)
    counted = ", ".join(f"{count} {name}" for name, count in sorted(binaries.machines.items()))
    apart = f"{cubins} CUDA cubin files counted apart"
    if binaries.cross_target:
        apart += (
            f"; {binaries.cross_target} of another machine under a target triple's folder, for cross-linking"
        )
    detail = f"{binaries.files} files in {image_paths.VENV}, ELF: {counted or 'none'} ({apart})"
    if binaries.foreign:
        detail += f"; not {machine}: {', '.join(binaries.foreign[:5])}"
    return CheckResult("elf-machine", not binaries.foreign and machine in binaries.machines, detail)


def gpu_code_results(binaries: Binaries, gpu_arch: str, hardware: str) -> list[CheckResult]:
    """Per checked library: whether it holds GPU code a GPU of `gpu_arch` (sm_100) runs, by CUDA's rules."""
    wanted = capability(gpu_arch)
    where = f"{hardware} (compute capability {wanted[0]}.{wanted[1]})"
    results = []
    for library, rule in GPU_LIBRARIES.items():
        listed = binaries.libraries.get(library, "not asked")
        if listed == "not asked":
            continue
        name = f"gpu-code:{library.rsplit('/', 1)[-1]}"
        if listed is None:
            results.append(CheckResult(name, False, f"{library} is not in the image"))
            continue
        containers = [[GpuCode.parse(code) for code in codes] for codes in listed]
        runnable = sorted({c for codes in containers for c in codes if c.runs_on(wanted)})
        without = sum(not any(c.runs_on(wanted) for c in codes) for codes in containers)
        every = sorted({c for codes in containers for c in codes})
        ok = bool(runnable) and (rule == "some" or without == 0)
        embedded = ", ".join(c.name for c in every)
        detail = (
            f"{where} runs {', '.join(c.name for c in runnable) or 'none of it'}; {without} of"
            f" {len(containers)} fatbin containers hold nothing it runs; embedded: {embedded}"
        )
        results.append(CheckResult(name, ok, detail))
    return results
