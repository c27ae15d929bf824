"""What the factory computes: serve arguments in the site's order, parallel sizes, multi-node flags."""

from __future__ import annotations

import pytest

from factory.blueprint import finish, plan_project
from factory.errors import InputError, RefusedError
from factory.plan.deployments import hardware_targets, plan_deployment
from factory.plan.images import plan_image_spec
from factory.plan.models import Deployment, ImagePlan
from factory.plan.preflight import preflight
from factory.project import Project, load_project
from factory.recipes.loader import load_tree
from factory.recipes.schema import Dependency, StrategyOverride
from factory.render.hashing import hashed_context
from factory.serve_args import flatten, resolve
from tests.conftest import FIXTURES, KIMI, TINY, blueprint_of

SEED_HARDWARE = ["h100", "h200", "b200", "gb200", "b300", "gb300", "mi300x", "mi325x", "mi350x", "mi355x"]
SEED_STRATEGIES = ["single_node_tp", "multi_node_tp", "multi_node_tp_pp", "multi_node_tep", "multi_node_dep"]


def kimi(project: Project, hardware: str) -> ImagePlan:
    return blueprint_of(project, KIMI, hardware).image


def plan_image(project: Project, loaded, hardware: str, variant: str) -> ImagePlan:  # type: ignore[no-untyped-def]
    spec = plan_image_spec(project, loaded, hardware, variant)
    return hashed_context(project.root, spec, project.catalog.server)[0]


def plan_compose(project: Project, image: ImagePlan, strategy: str, nodes: int) -> Deployment:
    return plan_deployment(project, image, strategy, nodes)


def test_every_seed_hardware_and_strategy_plus_cpu_is_planned(project: Project) -> None:
    plans = plan_project(project)
    kimi_images = {bp.image.hardware for bp in plans.images if bp.image.model_id == KIMI}
    assert kimi_images == {*SEED_HARDWARE, "cpu"}
    deployments = {(d.image.hardware, d.strategy) for d in plans.deployments if d.image.model_id == KIMI}
    assert deployments == {(hw, s) for hw in [*SEED_HARDWARE, "cpu"] for s in SEED_STRATEGIES}
    assert {bp.image.hardware for bp in plans.images if bp.image.model_id == TINY} == {"cpu"}


def test_each_image_is_planned_once_with_its_hash_deployments_and_files(project: Project) -> None:
    blueprint = finish(project, project.tree.recipe(KIMI), "h200", "default", 2)
    assert len(blueprint.image.inputs_hash) == 64
    assert all(d.image is blueprint.image for d in blueprint.deployments), "deployments share the one plan"
    assert {f.path.as_posix() for f in blueprint.image_files} >= {
        f"images/kimi-linear-48b-a3b-instruct/{blueprint.image.tag}/Dockerfile"
    }
    assert len(blueprint.compose_files) == 1 + 4 * 2 + 4, "node files of every deployment, and .env.example"
    with pytest.raises(ValueError, match="inputs_hash"):
        ImagePlan(**blueprint.image.model_dump(exclude={"inputs_hash"}))


def test_h200_serves_the_seed_command_with_tp_equal_to_gpus(project: Project) -> None:
    image = kimi(project, "h200")
    assert image.entrypoint_args == ["--model", KIMI, "--trust-remote-code", "--max-model-len", "1048576"]
    assert image.env == {}
    single = plan_compose(project, image, "single_node_tp", 1)
    assert single.roles[0].args == ["--tensor-parallel-size", "8"]
    assert image.base_image == "nvidia/cuda:12.8.1-devel-ubuntu22.04"
    assert image.pip_requirements == ["vllm==0.11.2"]


def test_amd_gets_its_override_and_the_vendor_image(project: Project) -> None:
    image = kimi(project, "mi300x")
    assert image.env == {"SAFETENSORS_FAST_GPU": "1"}
    assert image.entrypoint_args[-1] == "--no-enable-prefix-caching"
    assert "auto" not in image.entrypoint_args
    assert image.base_image == "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210"
    assert image.install_kind == "vendor-image"
    assert kimi(project, "h200").env == {}


def test_grace_trays_are_arm64_and_four_gpus(project: Project) -> None:
    for hardware in ("gb200", "gb300"):
        image = kimi(project, hardware)
        assert image.platform == "linux/arm64"
        assert plan_compose(project, image, "single_node_tp", 1).roles[0].args == [
            "--tensor-parallel-size",
            "4",
        ]


def test_multi_node_flags_per_strategy(project: Project) -> None:
    image = kimi(project, "h200")
    rendezvous = [
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        "2",
        "--master-addr",
        "${HEAD_ADDRESS}",
        "--master-port",
        "${MASTER_PORT}",
    ]
    tp = plan_compose(project, image, "multi_node_tp", 2)
    assert tp.roles[0].args == ["--tensor-parallel-size", "16", *rendezvous, "--node-rank", "0"]
    assert tp.roles[1].args == ["--tensor-parallel-size", "16", *rendezvous, "--node-rank", "1", "--headless"]
    assert [role.serves_http for role in tp.roles] == [True, False]
    pp = plan_compose(project, image, "multi_node_tp_pp", 2)
    assert pp.roles[1].args[:4] == ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]
    tep = plan_compose(project, image, "multi_node_tep", 2)
    assert tep.roles[0].args[:3] == ["--enable-expert-parallel", "--tensor-parallel-size", "16"]
    dep = plan_compose(project, image, "multi_node_dep", 2)
    assert dep.roles[1].args == [
        "--enable-expert-parallel",
        "--data-parallel-hybrid-lb",
        "--data-parallel-size",
        "16",
        "--data-parallel-size-local",
        "8",
        "--data-parallel-address",
        "${HEAD_ADDRESS}",
        "--data-parallel-rpc-port",
        "${DP_RPC_PORT}",
        "--data-parallel-start-rank",
        "8",
    ]
    assert all(role.serves_http for role in dep.roles), "hybrid load balancing: every node serves HTTP"
    assert dep.env == {"GLOO_SOCKET_IFNAME": "${IFACE_NAME}", "NCCL_SOCKET_IFNAME": "${IFACE_NAME}"}
    assert set(dep.settings_used) == {"HEAD_ADDRESS", "DP_RPC_PORT", "IFACE_NAME"}


def test_multi_node_bad_input(project: Project) -> None:
    image = kimi(project, "h200")
    with pytest.raises(InputError, match="needs 2 nodes or more"):
        plan_compose(project, image, "multi_node_tp", 1)
    with pytest.raises(InputError, match="runs on one node"):
        plan_compose(project, image, "single_node_tp", 2)
    with pytest.raises(InputError, match="unknown strategy"):
        plan_compose(project, image, "multi_node_tpp", 2)
    tiny = plan_image(project, project.tree.recipe(TINY), "cpu", "default")
    with pytest.raises(InputError, match="does not list this strategy"):
        plan_compose(project, tiny, "multi_node_tp", 2)


def test_later_parts_win_duplicate_flags() -> None:
    flags = resolve(
        [
            ("base", ["--max-model-len", "1000", "--enable-prefix-caching"]),
            ("strategy", ["--tensor-parallel-size", "8"]),
            ("hardware", ["--no-enable-prefix-caching", "--max-model-len=2000"]),
        ]
    )
    assert flatten(flags) == [
        "--tensor-parallel-size",
        "8",
        "--no-enable-prefix-caching",
        "--max-model-len=2000",
    ]


def test_upstream_schema_overrides_apply_in_order(tmp_path) -> None:

    real = load_project(__import__("tests.conftest", fromlist=["ROOT"]).ROOT)
    project = Project(tmp_path, load_tree(FIXTURES / "upstream-schema"), real.catalog)
    moe = project.tree.recipe("acme/Moe-Agent-1T")
    b300 = plan_image(project, moe, "b300", "nvfp4")
    # variant model, blackwell generation override, default-on features (text_only is opt-in)
    assert b300.weights == "acme/Moe-Agent-1T-NVFP4"
    assert "--attention-config" in b300.entrypoint_args
    assert "--language-model-only" not in b300.entrypoint_args
    assert "--mm-encoder-tp-mode" in b300.entrypoint_args
    assert b300.env == {"VLLM_USE_FLASHINFER_MOE_FP4": "1"}
    gb200 = plan_image(project, moe, "gb200", "default")
    assert "--mm-encoder-tp-mode" not in gb200.entrypoint_args, "opt-in on gb200"
    with pytest.raises(RefusedError, match="does not build ROCm images from the wheel index yet"):
        plan_image(project, moe, "mi300x", "default")
    small = project.tree.recipe("example/small-moe-it")
    with pytest.raises(InputError, match="no exact vLLM pin"):  # like upstream: `dependencies: []`
        plan_image(project, small, "h200", "default")
    pin = Dependency(command="pip install vllm==0.19.1")
    pinned = type(small)(small.recipe.model_copy(update={"dependencies": [pin]}), small.path, None)
    project.tree.recipes[small.model_id] = pinned
    image = plan_image(project, pinned, "h200", "default")
    assert plan_compose(project, image, "single_node_tp", 1).roles[0].args == ["--tensor-parallel-size", "1"]


def test_preflight_warns_about_sm103_with_its_source(project: Project) -> None:
    findings = [str(f) for f in preflight(project, kimi(project, "b300"))]
    assert any("sm_103" in f and "vllm issue 30630" in f for f in findings)
    assert not any("sm_" in f for f in (str(x) for x in preflight(project, kimi(project, "h200"))))


def test_trust_remote_code_without_revision_is_flagged(project: Project) -> None:
    assert any("--trust-remote-code" in str(f) for f in preflight(project, kimi(project, "h200")))


def test_one_replica_per_node_for_the_cpu_two_node_deployment(project: Project) -> None:
    tiny = plan_image(project, project.tree.recipe(TINY), "cpu", "default")
    plan = plan_compose(project, tiny, "multi_node_tp_dp", 2)
    common = [
        "--tensor-parallel-size", "1", "--data-parallel-size", "2", "--data-parallel-size-local", "1",
        "--data-parallel-address", "${HEAD_ADDRESS}", "--data-parallel-rpc-port", "${DP_RPC_PORT}",
    ]  # fmt: skip
    assert plan.roles[0].args == common
    assert plan.roles[1].args == [*common, "--data-parallel-start-rank", "1", "--headless"]
    assert [role.serves_http for role in plan.roles] == [True, False]
    assert plan_compose(project, tiny, "multi_node_tp_dp", 3).roles[2].args[-3:] == [
        "--data-parallel-start-rank", "2", "--headless",
    ]  # fmt: skip


def test_a_variant_serving_another_model_keeps_its_recipes_strategy_overrides(project: Project) -> None:
    tree = load_tree(FIXTURES / "upstream-schema")
    fixture = Project(project.root, tree, project.catalog)
    moe = tree.recipe("acme/Moe-Agent-1T")
    tweaked = moe.recipe.model_copy(update={"strategy_overrides": {"single_node_tp": StrategyOverride(tp=2)}})
    tree.recipes[moe.model_id] = type(moe)(tweaked, moe.path, None)
    nvfp4 = plan_image(fixture, tree.recipe("acme/Moe-Agent-1T"), "h200", "nvfp4")
    assert nvfp4.model_id == "acme/Moe-Agent-1T-NVFP4" and nvfp4.recipe_id == "acme/Moe-Agent-1T"
    assert plan_compose(fixture, nvfp4, "single_node_tp", 1).roles[0].args == ["--tensor-parallel-size", "2"]


def test_a_pinned_revision_pins_code_and_weights(project: Project) -> None:
    loaded = project.tree.recipe(KIMI)
    pinned = loaded.recipe.model_copy(
        update={"model": loaded.recipe.model.model_copy(update={"revision": "0123abcd"})}
    )
    image = plan_image(project, type(loaded)(pinned, loaded.path, None), "h200", "default")
    args = image.entrypoint_args
    assert args[args.index("--revision") + 1] == "0123abcd"
    assert args[args.index("--code-revision") + 1] == "0123abcd"
    assert not any("--trust-remote-code" in str(f) for f in preflight(project, image))


def test_hardware_the_factory_cannot_build_for_is_reported_and_skipped(project: Project) -> None:
    fixture = Project(project.root, load_tree(FIXTURES / "upstream-schema"), project.catalog)
    _, skipped_list = hardware_targets(fixture, fixture.tree.recipe("example/small-moe-it"))
    skipped = {entry.what: entry.reason for entry in skipped_list}
    assert "cannot build for Google tpu" in skipped["example/small-moe-it on trillium"]
    assert "cannot build for Intel cpu" in skipped["example/small-moe-it on xeon6"]


def test_the_inputs_hash_covers_the_build_context_and_nothing_else(scratch) -> None:  # type: ignore[no-untyped-def]
    def h200_hash() -> str:
        return blueprint_of(load_project(scratch), KIMI, "h200").image.inputs_hash

    before = h200_hash()
    strategy = scratch / "recipes" / "strategies" / "multi_node_tep.yaml"
    strategy.write_text(strategy.read_text().replace('"--enable-expert-parallel"', '"--enable-eplb"'))
    assert h200_hash() == before, "a flag only compose files carry must not move the immutable tag"
    recipe = scratch / "recipes" / "models" / "moonshotai" / "Kimi-Linear-48B-A3B-Instruct.yaml"
    recipe.write_text(
        recipe.read_text().replace('- "--trust-remote-code"', '- "--trust-remote-code"\n    - "--x"')
    )
    assert h200_hash() != before, "a flag in the image's entrypoint changes its build context"
