"""Arm64 (Grace) locks by release: where a set's CUDA torch comes from is catalog data by torch release, with
its evidence (the package index's aarch64 torch is a CPU build up to 2.10.0 and a CUDA 13 build from 2.11.0);
a set is a CUDA build when it pins a CUDA release (CUDA 13's `cuda-toolkit`, CUDA 12's runtime wheel); the
Grace images of one release share one set; an image whose release has none says so, naming the cause and
the first release that has one (vLLM 0.20.0)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from factory.base.settings import BuildSettings
from factory.blueprint import plan_recipe
from factory.lock import index
from factory.lock.resolve import install_sources, resolve_set
from factory.lockfile.model import INDEX_UNREACHABLE, NO_CUDA_TORCH, cuda_version, set_key
from factory.project import Project, load_project
from tests.conftest import ROOT

MINIMAX = "MiniMaxAI/MiniMax-M2.5"
LOCK = ROOT / "recipes" / "lock"
NO_EXTRA_INDEX = BuildSettings(pip_extra_index_url="")  # this machine's setting: no PyTorch index reached
NO_SETTINGS = BuildSettings()  # a user's machine: the catalog as it is


def test_a_cuda_13_set_is_known_by_its_cuda_toolkit_pin() -> None:
    """torch 2.11's set pins NVIDIA's cuda-toolkit meta-package (13.0.2) beside a runtime wheel of its own
    version (13.0.96): the toolkit's pin is the CUDA release. CUDA 12 sets name the runtime wheel alone."""
    arm64 = (LOCK / "sets" / "vllm-0.20.2-cuda-arm64-py3.11.txt").read_text()
    assert "cuda-toolkit==13.0.2" in arm64 and cuda_version(arm64) == "13.0"
    assert cuda_version((LOCK / "sets" / "vllm-0.11.2-cuda-amd64-py3.11.txt").read_text()) == "12.8"
    assert (
        cuda_version("cuda-toolkit==13.2.1 \\\n    --hash=sha256:00\nnvidia-cuda-runtime==13.0.96\n")
        == "13.2"
    )
    assert cuda_version("cuda-toolkit==13.0.2\n") == "13.0", "the toolkit alone names it"
    assert cuda_version("torch==2.10.0\nnumpy==2.2.6\n") is None, "a CPU torch: no CUDA release"


def test_the_arm64_torch_source_is_data_by_torch_release_whatever_the_machines_settings(
    project: Project,
) -> None:
    catalog, cuda = project.catalog, project.catalog.installs["cuda-pypi"]
    for settings in (NO_SETTINGS, NO_EXTRA_INDEX):  # from torch 2.11: the package index alone, either way
        assert install_sources(catalog, cuda, "linux/arm64", "0.20.2", settings, "2.11.0") == index.Sources(
            {}, "pypi"
        )
    before = install_sources(catalog, cuda, "linux/arm64", "0.19.1", NO_SETTINGS, "2.10.0")
    assert before.urls == {"pytorch-cu129": "https://download.pytorch.org/whl/cu129"}
    assert install_sources(catalog, cuda, "linux/amd64", "0.19.1", NO_SETTINGS, "2.10.0").urls == {}
    source = cuda.torch_source("linux/arm64", "2.10.0")
    assert source is not None and "platform_machine" in source.why and "--platform" in source.source
    assert cuda.first_index_release("linux/arm64") == "0.20.0"


def test_the_grace_set_comes_from_the_package_index_alone_and_is_cuda_13() -> None:
    lock = yaml.safe_load((LOCK / "vllm.lock.json").read_text())
    grace = lock["sets"][set_key("vllm", "0.20.2", "linux/arm64", "cuda", "3.11")]
    assert (grace["torch"], grace["cuda"], grace["indexes"]) == ("2.11.0", "13.0", {})
    assert set(grace["served"].values()) == {"pypi"} and grace["served"]["torch"] == "pypi"
    assert "vllm==0.20.2" in (LOCK / grace["requirements"]).read_text()


def test_grace_images_of_one_release_share_one_set_and_every_layer(tmp_path: Path) -> None:
    """GB200 and GB300 (and DGX Station) serve MiniMax from one locked set: the same requirements in every
    install layer; their Dockerfiles differ in the per-target metadata alone."""
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    shutil.copytree(ROOT / "catalog", tmp_path / "catalog")
    path = tmp_path / "catalog" / "hardware.yaml"
    data = yaml.safe_load(path.read_text())
    data["only_hardware"]["factory/minimax-m2.5-grace"] = ["gb200", "gb300", "dgx_station_gb300"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    plans = plan_recipe(load_project(tmp_path), load_project(tmp_path).tree.recipe(MINIMAX)).images
    grace = {b.image.hardware: b for b in plans if b.image.variant == "default" and not b.kv_store}
    assert {"gb200", "gb300"} <= set(grace)
    keys = {
        hw: b.image.install.lock_key if b.image.install else b.image.unbuildable for hw, b in grace.items()
    }
    assert set(keys.values()) == {"vllm-0.20.2-cuda-arm64-py3.11"}, keys
    first, second = grace["gb200"], grace["gb300"]
    files = {f.path.name: f.content for f in first.image_files if f.path.parent.name == "requirements"}
    assert files == {
        f.path.name: f.content for f in second.image_files if f.path.parent.name == "requirements"
    }
    dockerfiles = [
        next(f for f in b.image_files if f.path.name == "Dockerfile").content for b in (first, second)
    ]
    install = [text.decode().split("# ---- per target: metadata only ----")[0] for text in dockerfiles]
    assert install[0].splitlines()[2:] == install[1].splitlines()[2:], "the layers' steps are the same"


@pytest.mark.index
def test_a_release_before_torch_2_11_names_the_index_of_its_arm64_cuda_torch_and_the_first_that_needs_none(
    project: Project,
) -> None:
    """vLLM 0.11.2 pins torch 2.9.0, whose aarch64 build on the package index is a CPU build (asked of the
    index here). With the catalog as it is, the set needs PyTorch's CUDA index, which this machine cannot
    reach; with this machine's setting (no extra index) it resolves to the CPU torch and is refused."""
    cuda = project.catalog.installs["cuda-pypi"]
    refused, text = resolve_set(project.catalog, cuda, "0.11.2", "linux/arm64", NO_EXTRA_INDEX)
    assert text is None and refused.cause == NO_CUDA_TORCH and refused.torch == "2.9.0"
    assert "has no CUDA build" in str(refused.unresolvable) and "pytorch-cu129" in str(refused.unresolvable)
    assert "vLLM 0.20.0 is the first release" in str(refused.unresolvable)
    outside, text = resolve_set(project.catalog, cuda, "0.11.2", "linux/arm64", NO_SETTINGS)
    if index.unreachable("https://download.pytorch.org/whl/cu129") is None:  # a machine that reaches it
        assert outside.cuda is not None and outside.served.get("torch") == "pytorch-cu129"
        return
    assert outside.unreachable_index == "pytorch-cu129" and text is None
    assert "cannot be reached" in str(outside.unresolvable)
    assert "vLLM 0.20.0 is the first release" in str(outside.unresolvable)
    assert INDEX_UNREACHABLE == "index not reachable here"  # the cause `factory list` prints for it


def test_multi_node_grace_deployments_are_leader_worker_sets_on_arm64_nodes(project: Project) -> None:
    """Every pod of a Grace deployment asks for an arm64 node (kubernetes.io/arch), the leader's and the
    workers' of a multi-node one (a LeaderWorkerSet, as on every hardware), with the tray's 4 GPUs each."""
    from factory.render import kubernetes

    grace = next(
        b for b in plan_recipe(project, project.tree.recipe(MINIMAX)).images
        if b.image.hardware == "gb200" and b.image.variant == "default" and not b.kv_store
    )  # fmt: skip
    multi = [d for d in grace.deployments if d.deploy_type == "multi_node"]
    assert multi, "the recipe's multi-node strategies render on GB200"
    for deployment in multi:
        documents = kubernetes.objects(deployment)
        lws = next(d for d in documents if d["kind"] == "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
        for template in (lws["leaderTemplate"], lws["workerTemplate"]):
            assert template["spec"]["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
            assert template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    single = next(d for d in grace.deployments if d.layout == "single_node_tp")
    pod = next(d for d in kubernetes.objects(single) if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64"}


def test_grace_compose_files_name_their_platform_and_compose_reads_it() -> None:
    """`platform: linux/arm64` on GB200's vLLM services (linux/amd64 on B200's): where the tag is a
    multi-platform list, compose pulls the member of that platform. Compose v2 itself reads the file back.
    (The P/D router's image is built for linux/amd64 alone: its services say so, on Grace too.)"""
    from factory.base.tools import compose_binary

    for hardware, platform in (("gb200", "linux/arm64"), ("b200", "linux/amd64")):
        folder = ROOT / "compose" / "minimax-m2.5" / f"{hardware}-default"
        services = [
            yaml.safe_load(path.read_text())["services"] for path in sorted(folder.rglob("*compose.yaml"))
        ]
        vllm = [found["vllm"] for found in services if "vllm" in found]
        assert vllm and all(service["platform"] == platform for service in vllm), hardware
        single = folder / "single_node_tp" / "compose.yaml"
        env = {**os.environ, "HF_TOKEN": ""}
        done = subprocess.run(
            [str(compose_binary()), "-f", str(single), "config", "--format", "json"],
            capture_output=True, text=True, env=env, check=False, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["services"]["vllm"]["platform"] == platform


def test_factory_list_says_which_grace_images_build_and_why_the_others_do_not() -> None:
    """docs/grace.md's `factory list | grep -- '-gb200-'`: MiniMax (vLLM 0.20.2) has a Dockerfile; Kimi
    (vLLM 0.11.2, torch 2.9.0) names the cause, the index its CUDA torch comes from, and the first release."""
    listed = subprocess.run(
        [sys.executable, "-m", "factory", "--root", str(ROOT), "list"],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    grace = {
        line.split("\t")[0]: line.split("\t")[2] for line in listed.stdout.splitlines() if "-gb200-" in line
    }
    assert (
        grace["vllm-factory/minimax-m2.5:vllm0.20.2-gb200-default"]
        == "images/minimax-m2.5/vllm0.20.2-gb200-default"
    )
    kimi = grace["vllm-factory/kimi-linear-48b-a3b-instruct:vllm0.11.2-gb200-default"]
    assert kimi.startswith("not built (no CUDA torch): ") and "pytorch-cu129" in kimi
    assert kimi.endswith(
        "vLLM 0.20.0 is the first release whose linux/arm64 CUDA set the package index serves alone"
    )


def test_a_signed_member_of_a_multi_platform_list_runs_by_its_own_digest() -> None:
    """The signature, SBOM and provenance are attached to the member's digest, which the compose gate and the
    admission policy check: a deployment (one hardware, one platform) runs that digest, not the unsigned
    list's; an unsigned member joined in a list runs by the list's digest."""
    from factory.lockfile.published import Attestation, PublishedImage, Signed

    member, joined = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    attestation = Attestation(predicate_type="https://slsa.dev/provenance/v1", sha256="c" * 64, size=1)
    signed = Signed(
        recipe=MINIMAX,
        hardware="gb200",
        variant="default",
        public_key="-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        signature="sha256-" + "a" * 64 + ".sig",
        sbom=attestation,
        provenance=attestation,
    )
    fields = {
        "repository": "registry.example/vllm-factory/minimax-m2.5",
        "digest": member,
        "immutable_tag": "t",
    }
    listed = {"platforms_tag": "vllm0.20.2-sm_100-default", "platforms_digest": joined}
    assert PublishedImage(**fields, **listed).run_digest == joined
    assert PublishedImage(**fields, **listed, signed=signed).run_digest == member
    assert PublishedImage(**fields).run_digest == member
