"""The site's KV-offload row (taxonomy `kv_offload`), against the site's own command builder: its JSON API
writes no rendering with an offload option, so `tests/oracle/resolve_command.mjs` calls resolveCommand
(src/lib beside the oracle's build-api) for every single- and multi-node deployment of the tree with every
option.
Where the factory offers the option, every node's command (exactly, in order), the environment and the
companion commands must be the site's; where the factory refuses it, the site must have dropped it too."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from factory.recipes.loader import load_tree
from factory.synthesis.command import resolve, served_model
from factory.synthesis.kv_offload import refusal
from factory.synthesis.selection import KvOffload, Selection
from tests import kubernetes_checks as checks
from tests.conftest import ROOT, run_factory
from tests.site_builder import every_combination, resolve_on_the_site, upstream_tree

KIMI = "moonshotai/Kimi-Linear-48B-A3B-Instruct"


def test_every_deployment_with_every_kv_offload_option_is_what_the_sites_command_builder_computes() -> None:
    tree_path = upstream_tree()
    tree = load_tree(tree_path)
    options = tree.taxonomy.kv_offload
    assert options, f"{tree_path / 'taxonomy.yaml'} has no kv_offload row"
    cases: list[dict[str, Any]] = []
    ours: list[dict[str, Any]] = []
    for rendered in every_combination(tree):
        combo, recipe = rendered.combo, rendered.loaded.recipe
        deploy_type = tree.strategies[combo.strategy].deploy_type
        if deploy_type == "pd_cluster":
            continue
        for key, option in options.items():
            why = refusal(key, option, recipe, combo.strategy, deploy_type, rendered.profile)
            selection = Selection(
                recipe,
                combo.variant,
                combo.strategy,
                combo.hardware,
                combo.features,
                combo.node_count,
                kv_offload=KvOffload(key, option) if why is None else None,
            )
            command = resolve(selection, tree.strategies, tree.taxonomy)
            model = served_model(recipe, combo.variant)
            ours.append(
                {
                    "nodes": [process.argv(model) for process in command.nodes],
                    "env": command.nodes[0].env,
                    "companions": list(command.companions),
                    "key": f"{rendered.recipe_id}/{combo.variant}/{combo.hardware}/{combo.strategy}+{key}",
                    "offered": why is None,
                    "flags": option.args,
                }
            )
            cases.append(rendered.case(kv=key))
    site = resolve_on_the_site(tree_path, cases)
    assert len(site) == len(ours) > 1000, len(ours)
    differing = []
    for theirs, mine in zip(site, ours, strict=True):
        for part in ("nodes", "env", "companions"):
            if theirs[part] != mine[part]:
                differing.append(f"{mine['key']} {part}")
        if mine["offered"]:  # the option's connector is last on every node, so it wins the site's dedupe
            for argv in mine["nodes"]:
                assert argv[-len(mine["flags"]) :] == mine["flags"], mine["key"]
    offered = sum(mine["offered"] for mine in ours)
    by_option = {key: sum(m["offered"] for m in ours if m["key"].endswith(f"+{key}")) for key in options}
    print(f"KV offload: {len(ours)} compositions against the site's builder, {offered} offered: {by_option}")
    assert not differing, f"{len(differing)} differ, e.g. {differing[:5]}"
    assert all(by_option.values()), f"an option the tree never offers: {by_option}"


def upstream_show(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_factory(ROOT, "show", KIMI, "--recipes", str(upstream_tree()), "--out", str(tmp_path), *args)


def test_show_lists_the_options_the_site_offers_beside_a_deployment(tmp_path: Path) -> None:
    shown = upstream_show(tmp_path, "--hardware", "h200")
    assert shown.returncode == 0, shown.stderr
    offered = shown.stdout.split("(`--kv-offload OPTION`)\n")[1].split("\n\n")[0].splitlines()
    # Kimi-Linear records no verified run of the OffloadingConnector tiers (requires_opt_in)
    assert offered == ["simple", "lmcache"], offered


def test_show_composes_an_option_under_its_own_name_and_says_what_the_image_lacks(tmp_path: Path) -> None:
    simple = upstream_show(tmp_path, "--hardware", "h200", "--kv-offload", "simple")
    assert simple.returncode == 0, simple.stderr
    serve = simple.stdout.split("## Serve\n")[1].split("\n\n")[0]
    assert serve.splitlines()[-1].startswith(
        '  --kv-transfer-config \'{"kv_connector":"SimpleCPUOffloadConnector"'
    )
    # its own name: the plain deployment's label (and Kubernetes names, below) are not taken over
    assert "## Compose\nnot written by `factory generate`" in simple.stdout
    assert "ai.vllm.factory.deployment=kimi-linear-48b-a3b-instruct.h200-default.single_node_tp-simple" in (
        simple.stdout
    )
    lmcache = upstream_show(tmp_path, "--hardware", "h200", "--kv-offload", "lmcache")
    assert lmcache.returncode == 0, lmcache.stderr
    kv = lmcache.stdout.split("## KV offload: LMCache\n")[1]
    assert 'uv pip install "lmcache==0.5.1"' in kv and "lmcache server" in kv, kv
    manifest = upstream_show(tmp_path, "--hardware", "h200", "--kv-offload", "simple", "--format", "k8s")
    assert manifest.returncode == 0, manifest.stderr
    plain = upstream_show(tmp_path, "--hardware", "h200", "--format", "k8s")
    assert "SimpleCPUOffloadConnector" in manifest.stdout and "SimpleCPUOffloadConnector" not in plain.stdout
    names = [set(re.findall(r"^  name: (\S+)$", out.stdout, re.M)) for out in (manifest, plain)]
    assert names[0] and not names[0] & names[1], names  # applied beside the plain one, it replaces nothing
    for doc in yaml.safe_load_all(manifest.stdout):  # the API's own schemas, oldest and newest supported
        for version in (checks.KUBERNETES_VERSIONS[0], checks.KUBERNETES_VERSIONS[-1]):
            assert checks.core_problems(doc, version) == [], (version, doc["kind"])


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--kv-offload", "offloading_cpu"], "kv_offload_support.offloading_cpu is `verified`"),
        (["--kv-offload", "nope"], "unknown KV-offload option"),
        (["--strategy", "kv_store_centralized_mooncake", "--kv-offload", "simple"], "own --kv-transfer"),
        (["--strategy", "single_node_tep", "--kv-offload", "offloading_cpu"], "valid: multi_node_dep"),
        (["--model", "inclusionAI/Ming-omni-tts-0.5B", "--kv-offload", "simple"], "omni commands"),
    ],
    ids=["opt-in", "unknown", "kv-store", "no-such-strategy", "omni"],
)
def test_show_refuses_an_option_the_site_would_not_offer_and_says_why(
    tmp_path: Path, args: list[str], said: str
) -> None:
    model = args[1] if args[0] == "--model" else KIMI
    args = args[2:] if args[0] == "--model" else args
    tree, out = str(upstream_tree()), str(tmp_path)
    result = run_factory(ROOT, "show", model, "--recipes", tree, "--out", out, "--hardware", "h200", *args)
    assert result.returncode == 2, result.stderr  # bad input, said: no traceback
    assert said in result.stderr and "Traceback" not in result.stderr, result.stderr


HOSTILE_OPTIONS = {
    "evil/../../x": {"args": ["--kv-transfer-config", "{}"]},  # a key that would be a path in names
    "broken": {"args": "--foo", "env": None},  # not a list: unreadable, and the rest of the tree goes on
    # YAML's unquoted `no` is a string, true where the site tests it: the gate holds
    "no_means_yes": {"requires_opt_in": "no", "args": ["--kv-transfer-config", "{}"]},
    "quoting": {
        "args": ["--kv-transfer-config", "{}"],
        "install": 'pip install "x" # kind: Secret',
        "companion": {"label": "Server: kind: Secret", "command": "run $(id) `id`"},
    },
}


@pytest.fixture
def hostile_tree(tmp_path: Path) -> Path:
    """The shared corpus with options of the KV-offload row written by someone hostile or careless."""
    tree = tmp_path / "tree"
    shutil.copytree(upstream_tree(), tree)
    taxonomy = yaml.safe_load((tree / "taxonomy.yaml").read_text())
    taxonomy["kv_offload"].update(HOSTILE_OPTIONS)
    (tree / "taxonomy.yaml").write_text(yaml.safe_dump(taxonomy))
    return tree


def test_hostile_options_stop_nothing_else_inject_nothing_and_are_refused_by_name(
    hostile_tree: Path, tmp_path: Path
) -> None:
    def show(*args: str) -> subprocess.CompletedProcess[str]:
        tree, out = str(hostile_tree), str(tmp_path / "out")
        return run_factory(ROOT, "show", KIMI, "--recipes", tree, "--out", out, "--hardware", "h200", *args)

    plain = show()
    assert plain.returncode == 0, plain.stderr  # an unreadable option stops no other command
    offered = plain.stdout.split("(`--kv-offload OPTION`)\n")[1].split("\n\n")[0].splitlines()
    assert offered == ["simple", "lmcache", "quoting"], offered  # no unnameable key, no opt-in one
    refusals = {
        "evil/../../x": "not usable in a deployment's name",
        "broken": "this KV-offload option could not be read: args",
        "no_means_yes": "kv_offload_support.no_means_yes is `verified`",
    }
    for key, said in refusals.items():
        result = show("--kv-offload", key)
        assert result.returncode == 2 and said in result.stderr, (key, result.stderr)
    manifest = show("--kv-offload", "quoting", "--format", "k8s")
    assert manifest.returncode == 0, manifest.stderr
    documents = list(yaml.safe_load_all(manifest.stdout))
    assert [d["kind"] for d in documents] == ["Deployment", "Service"]  # no Secret slipped in
    assert '# needs `pip install "x" # kind: Secret`: not in the factory\'s images.' in manifest.stdout
    # Page text may span lines (an install line too): in a manifest's comment it is escaped onto one line.
    taxonomy = yaml.safe_load((hostile_tree / "taxonomy.yaml").read_text())
    taxonomy["kv_offload"]["quoting"]["install"] = "pip install x\nkind: Secret"
    (hostile_tree / "taxonomy.yaml").write_text(yaml.safe_dump(taxonomy))
    spanning = show("--kv-offload", "quoting", "--format", "k8s")
    assert spanning.returncode == 0, spanning.stderr
    assert [d["kind"] for d in yaml.safe_load_all(spanning.stdout)] == ["Deployment", "Service"]
    assert "kind: Secret" not in spanning.stdout.splitlines()
    assert "# needs `pip install x\\nkind: Secret`: not in the factory's images." in spanning.stdout
    # Any other control character (a terminal's escape) is refused where the tree is read, naming the field.
    taxonomy["kv_offload"]["quoting"]["companion"]["command"] = "run \x1b[2J"
    (hostile_tree / "taxonomy.yaml").write_text(yaml.safe_dump(taxonomy))
    refused = show("--kv-offload", "quoting")
    assert refused.returncode == 2, refused.stderr
    assert "kv_offload.quoting.companion.command: a control character" in refused.stderr
