"""What the factory plans for its own recipes: images, deployments, the commands each node runs, and the
places where those commands deliberately differ from the upstream site's (with their reasons)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from factory.blueprint import plan_project, plan_recipe
from factory.plan.deployment import Deployment, FlagEdit
from factory.plan.models import ImagePlan
from factory.plan.preflight import preflight
from factory.project import Project, load_project
from factory.recipes.loader import load_tree
from factory.render import compose
from tests.conftest import FIXTURES, KIMI, TINY, blueprint_of, recipes_tree, small_recipe

SEED_HARDWARE = ["h100", "h200", "b200", "gb200", "b300", "gb300", "mi300x", "mi325x", "mi350x", "mi355x"]
SEED_STRATEGIES = ["single_node_tp", "multi_node_tp", "multi_node_tp_pp", "multi_node_tep", "multi_node_dep"]


def kimi(project: Project, hardware: str) -> ImagePlan:
    return blueprint_of(project, KIMI, hardware).image


def deployment(project: Project, hardware: str, strategy: str, model: str = KIMI) -> Deployment:
    return blueprint_of(project, model, hardware).deployment(strategy)


def test_every_seed_hardware_and_strategy_plus_cpu_is_planned(project: Project) -> None:
    plans = plan_project(project)
    assert not plans.problems
    kimi_images = {bp.image.hardware for bp in plans.images if bp.image.model_id == KIMI}
    assert kimi_images == {*SEED_HARDWARE, "cpu"}
    kimi = [d for d in plans.deployments if d.image.model_id == KIMI]
    deployments = {(d.image.hardware, d.strategy) for d in kimi if d.deploy_type != "kv_store_lb"}
    assert deployments == {(hw, s) for hw in [*SEED_HARDWARE, "cpu"] for s in SEED_STRATEGIES}
    # Mooncake's KV stores where the site renders them (scalable NVIDIA and AMD hardware) and on the CPU
    # target (the catalog's choice); not buildable for Kimi, whose pin (vLLM 0.11.2) is below their 0.21.0.
    stores = {(d.image.hardware, d.strategy) for d in kimi if d.deploy_type == "kv_store_lb"}
    assert {hw for hw, _ in stores} == {*SEED_HARDWARE, "cpu"}
    kv_images = {d.image.hardware: d.image for d in kimi if d.deploy_type == "kv_store_lb"}
    assert all(image.install is None for image in kv_images.values())
    for hardware in ("h100", "h200", "b200", "b300", "mi300x"):  # on AMD's vendor image too (issue 47)
        assert "need vLLM 0.21.0 or later" in (kv_images[hardware].unbuildable or ""), hardware
    assert {bp.image.hardware for bp in plans.images if bp.image.model_id == TINY} == {"cpu"}


def test_each_image_is_planned_once_with_its_hash_deployments_and_files(project: Project) -> None:
    blueprint = blueprint_of(project, KIMI, "h200")
    assert len(blueprint.image.inputs_hash) == 64
    assert all(d.image is blueprint.image for d in blueprint.deployments), "deployments share the one plan"
    assert f"images/kimi-linear-48b-a3b-instruct/{blueprint.image.tag}/Dockerfile" in {
        f.path.as_posix() for f in blueprint.image_files
    }
    assert len([f for d in blueprint.deployments for f in compose.files(d)]) == 1 + 4 * 3, (
        "one file per node, and .env.example per multi-node"
    )
    with pytest.raises(ValueError, match="inputs_hash"):
        ImagePlan(**blueprint.image.model_dump(exclude={"inputs_hash"}))


def test_h200_serves_tp_per_node_as_recipe_data(project: Project) -> None:
    """The site renders TP 1 for Kimi-Linear on H200 (115 GB fits one GPU); the project's recipe says
    `tp: {default: 8, cpu: 1}` because the 1M-token context needs the node's memory."""
    single = deployment(project, "h200", "single_node_tp")
    assert single.roles[0].words == [
        KIMI, "--trust-remote-code", "--max-model-len", "1048576", "--tensor-parallel-size", "8",
    ]  # fmt: skip
    assert single.roles[0].argv[:3] == ["vllm", "serve", KIMI]
    assert deployment(project, "gb200", "single_node_tp").roles[0].words[-1] == "4", "capped at 4 GPUs"
    assert deployment(project, "cpu", "single_node_tp").roles[0].words[-1] == "1"
    assert single.image.default_command == single.roles[0].words, (
        "docker run IMAGE serves the recommended one"
    )


def test_amd_gets_its_override_and_the_vendor_image(project: Project) -> None:
    image = kimi(project, "mi300x")
    assert image.env == {"SAFETENSORS_FAST_GPU": "1"}, "set in every deployment: the image's ENV"
    assert image.default_command[-1] == "--no-enable-prefix-caching"
    assert (
        image.install is not None and image.install.base_image == "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210"
    )
    assert image.install.kind == "vendor-image"
    assert kimi(project, "h200").env == {}


def test_grace_trays_are_arm64_and_four_gpus(project: Project) -> None:
    for hardware in ("gb200", "gb300"):
        image = kimi(project, hardware)
        assert image.platform == "linux/arm64" and image.gpus_per_node == 4


def test_multi_node_flags_per_strategy_and_their_deviations(project: Project) -> None:
    tp = deployment(project, "h200", "multi_node_tp")
    head, worker = (role.words[4:] for role in tp.roles)
    rendezvous = ["--nnodes", "2"]
    assert head[:4] == ["--tensor-parallel-size", "16", *rendezvous]
    assert head[4:] == [
        "--node-rank", "0", "--master-addr", "$HEAD_IP",
        "--master-port", "$MASTER_PORT",
        "--host", "$BIND_ADDRESS",
    ]  # fmt: skip
    assert "--host" not in worker, "a headless worker serves no API"
    assert worker[4:7] == ["--node-rank", "1", "--master-addr"] and "--headless" in worker
    assert [role.serves_http for role in tp.roles] == [True, False]
    # vLLM picks the multiprocessing backend itself with --nnodes > 1 (0.11.1 on): no flag for it.
    assert {d.flag for d in tp.deviations} == {"--master-port", "--host"}
    port = next(d for d in tp.deviations if d.flag == "--master-port")
    assert "rendezvous port" in port.reason
    # Each rule recorded what it changed on which process, in the rendering's key paths.
    assert port.edits == [
        FlagEdit(process=path, before=[], after=["--master-port", "$MASTER_PORT"])
        for path in ("head_argv", "worker_argvs[0]")
    ]
    host = next(d for d in tp.deviations if d.flag == "--host")
    assert host.edits == [FlagEdit(process="head_argv", before=[], after=["--host", "$BIND_ADDRESS"])]
    pp = deployment(project, "h200", "multi_node_tp_pp")
    assert pp.roles[1].words[4:8] == ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]
    tep = deployment(project, "h200", "multi_node_tep")
    assert tep.roles[0].words[4:7] == ["--enable-expert-parallel", "--tensor-parallel-size", "16"]
    dep = deployment(project, "h200", "multi_node_dep")
    assert dep.roles[1].words[-2:] == ["--host", "$BIND_ADDRESS"], "host network: not on every interface"
    assert dep.roles[1].words[4:-2] == [
        "--enable-expert-parallel", "--data-parallel-hybrid-lb", "--data-parallel-size", "16",
        "--data-parallel-size-local", "8", "--data-parallel-address", "$HEAD_IP",
        "--data-parallel-start-rank", "8", "--data-parallel-rpc-port", "$DP_RPC_PORT",
    ]  # fmt: skip
    assert all(role.serves_http for role in dep.roles), "hybrid load balancing: every node serves HTTP"
    assert dep.roles[0].env == {"GLOO_SOCKET_IFNAME": "$IFACE_NAME", "NCCL_SOCKET_IFNAME": "$IFACE_NAME"}
    assert compose.settings_used(dep) == ["HEAD_IP", "DP_RPC_PORT", "BIND_ADDRESS", "IFACE_NAME"]


def test_one_replica_per_node_for_the_cpu_two_node_deployment(project: Project) -> None:
    plan = deployment(project, "cpu", "multi_node_tp_dp", model=TINY)
    common = [
        "--tensor-parallel-size", "1", "--data-parallel-size", "2", "--data-parallel-size-local", "1",
        "--data-parallel-address", "$HEAD_IP",
    ]  # fmt: skip
    head, worker = (role.words[role.words.index("--tensor-parallel-size") :] for role in plan.roles)
    assert head == [*common, "--data-parallel-rpc-port", "$DP_RPC_PORT", "--host", "$BIND_ADDRESS"]
    assert worker == [
        *common,
        "--data-parallel-start-rank",
        "1",
        "--data-parallel-rpc-port",
        "$DP_RPC_PORT",
        "--headless",
    ]
    assert [role.serves_http for role in plan.roles] == [True, False]
    assert "--headless" in {d.flag for d in plan.deviations}, "the site leaves it out; vLLM needs it"
    three = plan_recipe(project, project.tree.recipe(TINY), nodes=3).images[0].deployment("multi_node_tp_dp")
    assert three.roles[2].words[-5:] == [
        "--data-parallel-start-rank",
        "2",
        "--data-parallel-rpc-port",
        "$DP_RPC_PORT",
        "--headless",
    ]


def test_the_bundled_model_is_served_by_its_id(project: Project) -> None:
    image = blueprint_of(project, TINY, "cpu").image
    assert image.default_command[:3] == [
        "/opt/models/factory/tiny-random-llama", "--served-model-name", TINY,
    ]  # fmt: skip


def test_a_pinned_revision_pins_code_and_weights(tmp_path: Path) -> None:
    recipe = small_recipe()
    recipe["model"]["revision"] = "0123abcd"
    tree = recipes_tree(tmp_path / "tree", {"acme/Small-8B": recipe})
    project = load_project(Path(__file__).resolve().parent.parent, tree, tmp_path / "out")
    blueprint = blueprint_of(project, "acme/Small-8B", "h200")
    args = blueprint.image.default_command
    assert args[args.index("--revision") + 1] == "0123abcd" == args[args.index("--code-revision") + 1]
    assert not any("--trust-remote-code" in str(f) for f in blueprint.findings)
    kimi_findings = blueprint_of(load_project(Path(__file__).resolve().parent.parent), KIMI, "h200").findings
    assert any("--trust-remote-code" in str(f) for f in kimi_findings)


def test_preflight_warns_about_sm103_with_its_source(project: Project) -> None:
    findings = [str(f) for f in blueprint_of(project, KIMI, "b300").findings]
    assert any("sm_103" in f and "vllm issue 30630" in f for f in findings)
    assert not any("sm_" in str(f) for f in preflight(project, kimi(project, "h200")))


def test_hardware_the_factory_cannot_build_for_is_reported_and_skipped(project: Project) -> None:
    fixture = replace(project, tree=load_tree(FIXTURES / "upstream-schema"), lock=None)
    plans = plan_project(fixture)
    skipped = {
        (s.hardware, s.strategy): s.reason for s in plans.skipped if s.recipe == "Example/small-moe-it"
    }
    assert "cannot build for Google tpu" in skipped["trillium", "single_node_tp"]
    images = {bp.image.hardware for bp in plans.images if bp.image.recipe_id == "Example/small-moe-it"}
    assert "xeon6" in images, "Intel Xeon runs on the CPU image"
    assert "trillium" not in images


def test_a_tree_without_a_lock_renders_but_builds_no_image(tmp_path: Path) -> None:
    tree = recipes_tree(tmp_path / "tree", {"acme/Small-8B": small_recipe(dependencies=[])})
    project = load_project(Path(__file__).resolve().parent.parent, tree, tmp_path / "out")
    blueprint = blueprint_of(project, "acme/Small-8B", "h200")
    assert blueprint.image.install is None and "run `factory lock`" in (blueprint.image.unbuildable or "")
    assert blueprint.image_files == () and [f for d in blueprint.deployments for f in compose.files(d)], (
        "compose files, no build context"
    )
    assert blueprint.image.tag == "vllm-unresolved-h200-default"


def test_the_inputs_hash_covers_the_build_context_and_nothing_else(scratch: Path) -> None:
    def h200_hash() -> str:
        return blueprint_of(load_project(scratch), KIMI, "h200").image.inputs_hash

    def tep_args() -> list[str]:
        blueprint = blueprint_of(load_project(scratch), KIMI, "h200")
        return [arg for role in blueprint.deployment("multi_node_tep").roles for arg in role.words]

    before, tep_before = h200_hash(), tep_args()
    strategy = scratch / "recipes" / "strategies" / "multi_node_tep.yaml"
    text = strategy.read_text()
    strategy.write_text(text.replace('"--enable-expert-parallel"', '"--enable-eplb"'))
    tep_after = tep_args()
    assert "--enable-eplb" in tep_after and tep_after != tep_before, "the edit changed the TEP commands"
    assert h200_hash() == before, "a flag only compose files carry must not move the immutable tag"
    recipe = scratch / "recipes" / "models" / "moonshotai" / "Kimi-Linear-48B-A3B-Instruct.yaml"
    text = recipe.read_text()
    recipe.write_text(text.replace('- "--trust-remote-code"', '- "--trust-remote-code"\n    - "--x"'))
    assert recipe.read_text() != text
    default = blueprint_of(load_project(scratch), KIMI, "h200").image.default_command
    assert "--x" in default, "the edit reached the image's default command"
    assert h200_hash() != before, "a flag of the image's default command changes its build context"
