"""The conformance check is exact: planted differences between the site's rendering and the factory's are
found, and only the edits a deviation rule recorded excuse a difference, on the process it names.

The site renderings here are written in the shape of the site's JSON API (what its build-api writes); the
whole corpus against the real build-api is tests/test_corpus.py."""

from __future__ import annotations

import copy
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from factory.report.conformance import Oracle, compare, judge, oracle_renderings

HEAD = ["vllm", "serve", "acme/Big", "--tensor-parallel-size", "16", "--nnodes", "2", "--node-rank", "0"]
HEAD += ["--master-addr", "$HEAD_IP"]
WORKER = ["vllm", "serve", "acme/Big", "--tensor-parallel-size", "16", "--nnodes", "2", "--node-rank", "1"]
WORKER += ["--master-addr", "$HEAD_IP", "--headless"]
SITE_MULTI: dict[str, Any] = {
    "variant": "default",
    "hardware": "h200",
    "strategy": "multi_node_tp",
    "deploy_type": "multi_node",
    "env": {"NCCL_SOCKET_IFNAME": "$IFACE_NAME"},
    "head_argv": HEAD,
    "worker_argvs": [WORKER],
}
PORT_EDIT = {"process": "head_argv", "before": [], "after": ["--master-port", "$MASTER_PORT"]}


def factory_of(site: dict[str, Any], deviations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The factory's rendering of the same deployment, before any planted difference."""
    mine = {key: copy.deepcopy(value) for key, value in site.items() if key != "deploy_type"}
    mine |= {"recipe": "acme/Big", "model": "acme/Big", "deploy_type": site["deploy_type"]}
    mine["deviations"] = deviations or []
    return mine


def with_port(site: dict[str, Any]) -> dict[str, Any]:
    mine = factory_of(site, [{"flag": "--master-port", "reason": "a setting", "edits": [PORT_EDIT]}])
    mine["head_argv"] += ["--master-port", "$MASTER_PORT"]
    return mine


def test_the_same_commands_are_equal_and_recorded_edits_make_a_deviation() -> None:
    assert judge(SITE_MULTI, factory_of(SITE_MULTI)) == ("equal", "")
    assert judge(SITE_MULTI, with_port(SITE_MULTI)) == ("deviation", "")


def plant_headless_head(mine: dict[str, Any]) -> None:
    mine["head_argv"].append("--headless")


def plant_loopback_master(mine: dict[str, Any]) -> None:
    argv = mine["worker_argvs"][0]
    argv[argv.index("--master-addr") + 1] = "127.0.0.1"


def plant_renamed_placeholder(mine: dict[str, Any]) -> None:
    argv = mine["worker_argvs"][0]
    argv[argv.index("--master-addr") + 1] = "$MASTER_ADDR"


def plant_other_model_on_worker(mine: dict[str, Any]) -> None:
    mine["worker_argvs"][0][2] = "acme/Other"


def plant_extra_env(mine: dict[str, Any]) -> None:
    mine["env"]["VLLM_EXTRA"] = "1"


def plant_missing_env(mine: dict[str, Any]) -> None:
    mine["env"].pop("NCCL_SOCKET_IFNAME")


def plant_port_on_worker_too(mine: dict[str, Any]) -> None:
    """The rule recorded an edit on the head only: the same flag on a worker is not excused by it."""
    mine["worker_argvs"][0] += ["--master-port", "$MASTER_PORT"]


def plant_other_port_value(mine: dict[str, Any]) -> None:
    argv = mine["head_argv"]
    argv[argv.index("--master-port") + 1] = "29501"


def plant_duplicate_flag(mine: dict[str, Any]) -> None:
    mine["head_argv"] += ["--nnodes", "2"]


@pytest.mark.parametrize(
    ("plant", "reason"),
    [
        (plant_headless_head, "head_argv: --headless"),
        (plant_loopback_master, "worker_argvs[0]: --master-addr"),
        (plant_renamed_placeholder, "worker_argvs[0]: --master-addr"),
        (plant_other_model_on_worker, "worker_argvs[0]: served model"),
        (plant_extra_env, "env: VLLM_EXTRA"),
        (plant_missing_env, "env: NCCL_SOCKET_IFNAME"),
        (plant_port_on_worker_too, "worker_argvs[0]: --master-port"),
        (plant_other_port_value, "head_argv: --master-port"),
        (plant_duplicate_flag, "head_argv: --nnodes"),
    ],
)
def test_a_planted_difference_is_found_even_beside_a_recorded_deviation(plant: Any, reason: str) -> None:
    mine = with_port(SITE_MULTI)
    plant(mine)
    assert judge(SITE_MULTI, mine) == ("differs", reason)


def test_an_edit_that_removes_what_the_site_does_not_have_is_a_difference() -> None:
    edit = {"process": "head_argv", "before": ["--max-model-len", "auto"], "after": []}
    mine = factory_of(SITE_MULTI, [{"flag": "--max-model-len", "reason": "old vLLM", "edits": [edit]}])
    verdict, reason = judge(SITE_MULTI, mine)
    assert verdict == "differs" and "--max-model-len auto" in reason


def test_environment_edits_are_applied_both_ways() -> None:
    edit = {"process": "env", "env": "NCCL_SOCKET_IFNAME", "before": "$IFACE_NAME", "after": "eth0"}
    mine = factory_of(SITE_MULTI, [{"flag": "env", "reason": "r", "edits": [edit]}])
    mine["env"]["NCCL_SOCKET_IFNAME"] = "eth0"
    assert judge(SITE_MULTI, mine) == ("deviation", "")
    wrong = copy.deepcopy(edit) | {"before": "ib0"}
    mine["deviations"][0]["edits"] = [wrong]
    assert judge(SITE_MULTI, mine)[0] == "differs"


SITE_PD: dict[str, Any] = {
    "variant": "default",
    "hardware": "h200",
    "strategy": "pd_cluster",
    "deploy_type": "pd_cluster",
    "prefill": {"argv": ["vllm", "serve", "acme/Big", "--port", "8001"], "env": {"A": "1"}},
    "decode": {"argv": ["vllm", "serve", "acme/Big", "--port", "8002"], "env": {}},
    "router": {
        "command": "vllm-router --policy round_robin \\\n    --prefill http://$PREFILL_NODE_1:8001 \\\n"
        "    --decode http://$DECODE_NODE_1:8002"
    },
}


def factory_pd() -> dict[str, Any]:
    roles = {
        "prefill": {"argv": list(SITE_PD["prefill"]["argv"]), "env": {"A": "1"}},
        "decode": {"argv": list(SITE_PD["decode"]["argv"]), "env": {}},
        "router": {
            "argv": [
                *("vllm-router", "--policy", "round_robin", "--prefill", "http://$PREFILL_NODE_1:8001"),
                *("--decode", "http://$DECODE_NODE_1:8002"),
            ]
        },
    }
    return {"recipe": "acme/Big", "model": "acme/Big", "variant": "default", "hardware": "h200"} | {
        "strategy": "pd_cluster",
        "deploy_type": "pd_cluster",
        "roles": roles,
        "deviations": [],
    }


def test_pd_pools_and_the_router_are_compared() -> None:
    assert judge(SITE_PD, factory_pd()) == ("equal", "")
    mine = factory_pd()
    mine["roles"]["router"]["argv"][2] = "cache_aware"
    assert judge(SITE_PD, mine) == ("differs", "roles.router.argv: --policy")
    mine = factory_pd()
    mine["roles"]["decode"]["argv"][4] = "8001"
    assert judge(SITE_PD, mine) == ("differs", "roles.decode.argv: --port")
    mine = factory_pd()
    mine["roles"]["prefill"]["env"] = {}
    assert judge(SITE_PD, mine) == ("differs", "roles.prefill.env: A")


def write_site(folder: Path, name: str, data: dict[str, Any]) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_every_site_rendering_is_compared_once_by_recipe_not_by_served_model(tmp_path: Path) -> None:
    """Two recipes serving one model each get their own comparison; a promoted variant's folder names its
    recipe; the factory's leftovers are counted with why (a KV-store rendering with no factory
    counterpart is missing, as any other)."""
    single = {"variant": "default", "hardware": "h200", "strategy": "single_node_tp"}
    single |= {"deploy_type": "single_node", "env": {}}
    write_site(tmp_path, "acme/A/hw/h200/strategies/single_node_tp.json", single | {"argv": HEAD[:5]})
    write_site(tmp_path, "acme/A/strategies/single_node_tp.json", single | {"argv": HEAD[:5]})  # a copy
    write_site(tmp_path, "acme/B/hw/h200/strategies/single_node_tp.json", single | {"argv": HEAD[:3]})
    kv = {"variant": "default", "hardware": "h200", "strategy": "kv_store_lb", "deploy_type": "kv_store_lb"}
    write_site(tmp_path, "acme/A/hw/h200/strategies/kv_store_lb.json", kv | {"vllm_argv": HEAD[:3]})
    oracle = oracle_renderings(tmp_path)
    assert len(oracle.renderings) == 3
    a = {"recipe": "acme/A", "model": "acme/Big"} | single | {"argv": HEAD[:5], "deviations": []}
    b = {"recipe": "acme/B", "model": "acme/Big"} | single | {"argv": HEAD[:3], "deviations": []}
    omni = {
        "recipe": "acme/C",
        "model": "acme/C",
        "strategy": "omni-t2i",
        "argv": ["vllm", "serve", "acme/C"],
    }
    comparison = compare(oracle, [a, b, omni])
    assert comparison.counts["equal"] == 2 and comparison.counts["missing"] == 1, comparison.table()
    assert any("omni" in why for why in comparison.uncompared)
    swapped = compare(oracle, [a | {"argv": HEAD[:3]}, b | {"argv": HEAD[:5]}])
    assert swapped.counts["differs"] == 2, swapped.table()


CONNECTOR = ["--kv-transfer-config", '{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}']
ROUTER = (
    "vllm-router --policy cache_aware \\\n    --backend-url http://$VLLM_INSTANCE_1:8000 \\\n"
    "    --backend-url http://$VLLM_INSTANCE_2:8000 \\\n    --host $ROUTER_HOST \\\n    --port $ROUTER_PORT"
)


def _kv_site() -> dict[str, Any]:
    """A centralized KV-store rendering of a two-node instance, in the site's keys."""
    head = [*HEAD, "--master-addr", "$VLLM_INSTANCE_1", *CONNECTOR]
    worker = [*HEAD[:-1], "1", "--master-addr", "$VLLM_INSTANCE_1", "--headless", *CONNECTOR]
    return {
        "hardware": "h200",
        "strategy": "kv_store_centralized_mooncake",
        "variant": "default",
        "node_count": 2,
        "deploy_type": "kv_store_lb",
        "env": {
            "NCCL_SOCKET_IFNAME": "$IFACE_NAME",
            "MOONCAKE_CONFIG_PATH": "$MOONCAKE_CONFIG_PATH",
            "PYTHONHASHSEED": 0,
        },
        "serving_strategy": "multi_node_tp",
        "kv_min_vllm_version": "0.21.0",
        "instances": 2,
        "vllm_argv": head,
        "vllm_worker_argvs": [worker],
        "vllm_install": "uv pip install 'mooncake-transfer-engine>=0.3.10'",
        "master": {"command": "mooncake_master \\\n  -rpc_port=50051", "description": "coordinator"},
        "store": {
            "command": "python3 -m mooncake.mooncake_store_service",
            "description": "",
            "config": {"protocol": "rdma", "global_segment_size": "500GB"},
            "note": "",
        },
        "router": {"command": ROUTER, "install": "uv pip install vllm-router", "port": 30080},
        "mooncake_config": {"protocol": "rdma", "global_segment_size": 0, "enable_offload": False},
    }


def _kv_mine(site: dict[str, Any]) -> dict[str, Any]:
    mine = {k: copy.deepcopy(v) for k, v in site.items() if k not in ("router", "master", "store")}
    mine |= {"recipe": "acme/A", "model": "acme/Big", "master": {"command": site["master"]["command"]}}
    mine["store"] = {"command": site["store"]["command"], "config": copy.deepcopy(site["store"]["config"])}
    mine["store_argv"] = shlex.split(site["store"]["command"])
    mine["router_argv"] = [
        "vllm-router", "--policy", "cache_aware", "--backend-url", "http://$VLLM_INSTANCE_1:8000",
        "--backend-url", "http://$VLLM_INSTANCE_2:8000", "--host", "$ROUTER_HOST", "--port", "$ROUTER_PORT",
    ]  # fmt: skip
    return mine


def _plant(change: str, mine: dict[str, Any]) -> None:
    head = mine["vllm_argv"]
    if change == "connector-not-last":
        mine["vllm_argv"] = [*head[:3], *CONNECTOR, *[t for t in head[3:] if t not in CONNECTOR]]
    elif change == "worker-meets-elsewhere":
        mine["vllm_worker_argvs"][0][mine["vllm_worker_argvs"][0].index("$VLLM_INSTANCE_1")] = "$HEAD_IP"
    elif change == "one-backend":
        del mine["router_argv"][5:7]
    elif change == "hash-seed-as-text":
        mine["env"]["PYTHONHASHSEED"] = "0"
    elif change == "no-config-path":
        del mine["env"]["MOONCAKE_CONFIG_PATH"]
    elif change == "master":
        mine["master"]["command"] = "mooncake_master"
    elif change == "store-config":
        mine["store"]["config"]["protocol"] = "tcp"
    elif change == "vllm-config-type":
        mine["mooncake_config"]["global_segment_size"] = "0"
    elif change == "amd-wheel":
        mine["vllm_install"] = "uv pip install 'mooncake-transfer-engine-non-cuda>=0.3.10'"
    elif change == "one-instance":
        mine["instances"] = 1
    elif change == "serving":
        mine["serving_strategy"] = "multi_node_tep"


@pytest.mark.parametrize(
    "change",
    [
        "connector-not-last", "worker-meets-elsewhere", "one-backend", "hash-seed-as-text", "no-config-path",
        "master", "store-config", "vllm-config-type", "amd-wheel", "one-instance", "serving",
    ],
)  # fmt: skip
def test_a_kv_store_rendering_is_equal_only_when_every_part_of_it_is(change: str) -> None:
    """Each process exactly (the store's connector flags last: vLLM reads the last), the environment with
    its types, the router's backends, the master, the store service's and the instances' configs, the
    wheel, the instance count and the serving strategy."""
    site = _kv_site()
    assert judge(site, _kv_mine(site)) == ("equal", "")
    mine = _kv_mine(site)
    _plant(change, mine)
    verdict, reason = judge(site, mine)
    assert verdict == "differs", (change, reason)


def test_a_site_rendering_with_no_factory_counterpart_is_missing_unless_its_hardware_has_no_entry() -> None:
    site = {"variant": "default", "hardware": "tpu_v6e", "strategy": "single_node_tp", "argv": HEAD[:3]}
    oracle = Oracle(renderings={("acme/A", "default", "tpu_v6e", "single_node_tp"): site})
    skip = {"recipe": "acme/A", "model": "acme/A", "variant": "default", "hardware": "tpu_v6e"}
    skip |= {
        "strategy": "single_node_tp",
        "skipped": "the factory cannot build for Google tpu: no catalog entry",
    }
    assert compare(oracle, [skip]).counts["skipped"] == 1
    assert compare(oracle, []).counts["missing"] == 1
    assert compare(oracle, []).rate == 0.0
