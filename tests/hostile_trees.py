"""Hostile recipe trees, and the factory run in this process, for the hostile-input tests.

Trees (tests/test_hostile_property.py) are drawn by Hypothesis from the schema: a recipe, strategies and KV
stores made from the project's own, each with values of the classes the hostile rounds found (folded names,
huge and non-finite numbers, odd YAML scalars, unclosed quotes, big counts, unknown keys) planted where the
schema reads them. A tree is data (`Tree`: file -> document) written as YAML text, so that a scalar reaches
the reader exactly as a person would type it. `factory` and `in_process` run a command through the CLI's own
entry point in this process (a second Python cost about a second per command: most of these tests' time)."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from factory.cli import main
from tests.conftest import ROOT, small_recipe

# Scalars as typed in a YAML file (each one a valid YAML scalar on its own): the odd ones YAML readers
# disagree on, numbers past a double, dates, tags that yield no text, placeholders and shell text.
SCALARS = [
    ".inf", "-.inf", ".nan", "1e400", "-1e400", "1e-7", "1e21", "1" * 30, "9" * 400, "0x" + "f" * 300,
    "0x1f90", "0o17", "0b101", "2026-12-03", "2026-02-30", "2001-12-14t21:59:43.10-05:00",
    "!!binary aGVsbG8=", "!!set {a: null}", "!!omap [{a: 1}]", "!!str 12", "!!int abc", "yes", "off",
    "~", "null", "true", "-0.0", "+12", ".5", "1_000", "0", "-5", "65536", "8000", "'$(x)'", "'$HEAD_IP'",
    "'70_000'", "'8000.0'", "''", "' 9000'", "'a b'", "'\"unclosed'",
]  # fmt: skip
COUNTS = ["0", "1", "2", "3", "64", "65", "4096", "-1", "true", "1e400", "9" * 400, "2.0", "'3'", "0x2"]
SIZES = ["0", "0GB", "-5", "-100GB", ".inf", "1e400", "infGB", "'256MB'", "'500GB'", "1e30", "'1.5GB'",
         "'abc'", "true", "'2PB'", "4096"]  # fmt: skip
SHELL = ["mooncake_master 'oops", 'mooncake_master "x', "mooncake_master -rpc_port=50051",
         "mooncake_master \\", "# only a comment", "mooncake_master -rpc_port=50051 # note"]  # fmt: skip
INSTALLS = ["uv pip install 'mooncake-transfer-engine>=0.3.10'", "uv pip install 'mooncake", 'pip install "x']
CONFIG_TEXT = ["$(x)", "$HEAD_IP", "$MOONCAKE_DEVICE_NAME", "${MOONCAKE_DEVICE_NAME}", "$foo", "$", "a$$b",
               "$MOONCAKE_DEVICE_NAMEx", "$UNKNOWN_SETTING", "", "mlx5_0"]  # fmt: skip
FLAGS = ["--port", "--tensor-parallel-size", "--tensor_parallel_size", "-tp", "--max-model-len", "--port="]
ENV_NAMES = ["A", "B_1", "_X", "NCCL_DEBUG", "PYTHONHASHSEED", "1A", "a-b"]
# Names that fold to one in some output (compose project names, Kubernetes names, case)
STRATEGY_TWINS = ["single-node-tp", "Single_Node_TP", "single.node.tp", "single_node_tp2"]
STORE_TWINS = ["kv-store-distributed-mooncake", "KV_Store_Distributed_Mooncake",
               "kv_store.distributed_mooncake", "kv_store_distributed_mooncake2"]  # fmt: skip
PROFILES = [["cpu"], ["h200"], ["cpu", "h200"], ["cpu", "mi300x"]]
STRATEGIES = ["single_node_tp", "multi_node_tp", "pd_cluster", "single_node_dep"]
STORES = ["kv_store_distributed_mooncake", "kv_store_centralized_mooncake"]
RECIPE = "models/acme/Small-8B.yaml"
CHANGES = ["count", "size", "shell", "install", "config", "env", "keys"]  # what a KV store's draw changes


@dataclass(frozen=True)
class Raw:
    """A scalar written into the YAML text as it is typed, unquoted."""

    text: str


Tree = dict[str, Any]  # path in the tree -> its document (Raw scalars anywhere)


def write_tree(tree: Tree, root: Path) -> None:
    """The tree's files under `root`, exactly these: files of an earlier tree that this one lacks go."""
    wanted = {root / path for path in tree}
    if root.exists():
        for path in [p for p in root.rglob("*") if p.is_file()]:
            if path not in wanted:
                path.unlink()
    for relative, document in tree.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        text = yaml_text(document)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")


def yaml_text(document: Any) -> str:
    """YAML for a document whose Raw scalars are written as typed: each is dumped as a marker, then the
    marker replaced by the text."""
    raws: list[str] = []

    def mark(value: Any) -> Any:
        if isinstance(value, Raw):
            raws.append(value.text)
            return f"RAW{len(raws) - 1}MARK"
        if isinstance(value, dict):
            return {key: mark(item) for key, item in value.items()}
        if isinstance(value, list):
            return [mark(item) for item in value]
        return value

    text = yaml.dump(mark(document), Dumper=yaml.CSafeDumper, sort_keys=False, width=10_000)
    for index in reversed(range(len(raws))):
        text = text.replace(f"RAW{index}MARK", raws[index])
    return text


def _project_yaml(relative: str) -> Any:
    """A fresh copy of one of the project's files, as data (each read once)."""
    return copy.deepcopy(_read_project_yaml(relative))


@functools.cache
def _read_project_yaml(relative: str) -> Any:
    return yaml.safe_load((ROOT / "recipes" / relative).read_text(encoding="utf-8"))


def _sometimes(value: st.SearchStrategy[Any], default: Any = None, odds: int = 4) -> st.SearchStrategy[Any]:
    """`value` one time in `odds`, else `default`: each hostile value rare enough that most trees reach
    planning and rendering, and every kind still met many times over 500 trees."""
    return rarely(odds).flatmap(lambda hostile: value if hostile else st.just(default))


def rarely(odds: int = 4) -> st.SearchStrategy[bool]:
    """True one time in `odds` (sampled: integers() leans to its bounds, which made rare things common)."""
    return st.sampled_from([False] * (odds - 1) + [True])


def _raw(pool: list[str]) -> st.SearchStrategy[Raw]:
    return st.sampled_from(pool).map(Raw)


def _unknown_keys() -> st.SearchStrategy[dict[str, int]]:
    count = _sometimes(st.integers(1, 40), 0)
    return count.map(lambda count: {f"unknown_key_{n}": n for n in range(count)})


def _env() -> st.SearchStrategy[dict[str, Raw]]:
    names = st.sampled_from(ENV_NAMES[:5] * 6 + ENV_NAMES)  # a bad name now and then
    return st.dictionaries(names, _raw(SCALARS), max_size=3)


@st.composite
def _flags(draw: st.DrawFn) -> list[Any]:
    """A flag list with port and count flags, each followed by a hostile value (or holding it after `=`)."""
    flags: list[Any] = []
    for _ in range(draw(_sometimes(st.integers(1, 2), 0))):
        flag, value = draw(st.sampled_from(FLAGS)), draw(_raw(SCALARS))
        flags += [Raw(f"'{flag}{value.text.strip(chr(39))}'")] if flag.endswith("=") else [flag, value]
    return flags


@st.composite
def recipes(draw: st.DrawFn, strategies: list[str]) -> dict[str, Any]:
    """The small recipe, offering strategies of the tree (now and then one it lacks), with hostile values."""
    recipe = small_recipe()
    choices = STRATEGIES if draw(rarely()) else strategies
    recipe["compatible_strategies"] = draw(st.lists(st.sampled_from(choices), min_size=1, unique=True))
    recipe["model"]["base_env"] = draw(_env())
    recipe["model"]["base_args"] = ["--trust-remote-code", *draw(_flags())]
    default = recipe["variants"]["default"]
    tp = draw(_sometimes(_raw(COUNTS)))
    if tp is not None:
        default["tp"] = tp
    twins = draw(_sometimes(st.sampled_from([["v1.0", "v1-0"], ["Fast", "fast"], ["fp8"]]), [], odds=6))
    recipe["variants"] = {"default": default, **{name: dict(default) for name in twins}}
    recipe.update(draw(_unknown_keys()))
    return recipe


@st.composite
def strategy_files(draw: st.DrawFn) -> dict[str, Any]:
    """strategies/*.yaml: single_node_tp always (the recipe needs one), others drawn, each changed, and maybe
    a twin whose name folds together with single_node_tp's."""
    names = ["single_node_tp", *draw(st.lists(st.sampled_from(STRATEGIES[1:]), unique=True))]
    files: dict[str, Any] = {}
    for name in names:
        document = _project_yaml(f"strategies/{name}.yaml")
        if draw(_sometimes(st.just(True), False)):
            document["env"] = draw(_env())
            document["vllm_args"] = draw(_flags())
            document.update(draw(_unknown_keys()))
        files[f"strategies/{name}.yaml"] = document
    twin = draw(_sometimes(st.sampled_from(STRATEGY_TWINS), odds=8))
    if twin is not None:
        original = files["strategies/single_node_tp.yaml"]
        files[f"strategies/{twin}.yaml"] = {**copy.deepcopy(original), "name": twin}
    return files


@st.composite
def store_files(draw: st.DrawFn) -> dict[str, Any]:
    """kv_store/*.yaml: none, one or both of the project's, each with hostile counts, sizes, shell text,
    config values and keys, and maybe a twin whose name folds together with the distributed store's."""
    files: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(STORES), unique=True)):
        document = _project_yaml(f"kv_store/{name}.yaml")
        change = draw(_sometimes(st.lists(st.sampled_from(CHANGES), min_size=1, max_size=2), [], odds=2))
        if "count" in change:
            document["default_instances"] = draw(_raw(COUNTS))
        if "size" in change:
            document["mooncake_vllm_config"]["template"]["global_segment_size"] = draw(_raw(SIZES))
        if "shell" in change:
            document["mooncake_master"]["command"] = draw(st.sampled_from(SHELL))
        if "install" in change:
            document["vllm"]["install"] = {"nvidia": draw(st.sampled_from(INSTALLS)), "amd": "pip install x"}
        if "config" in change:
            document["mooncake_vllm_config"]["template"]["device_name"] = draw(st.sampled_from(CONFIG_TEXT))
        if "env" in change:
            document["vllm"]["env"] = {"PYTHONHASHSEED": draw(_raw(SCALARS))}
        if "keys" in change:
            document.update(draw(_unknown_keys()))
        files[f"kv_store/{name}.yaml"] = document
    twin = draw(_sometimes(st.sampled_from(STORE_TWINS), odds=8))
    if twin is not None and "kv_store/kv_store_distributed_mooncake.yaml" in files:
        original = files["kv_store/kv_store_distributed_mooncake.yaml"]
        files[f"kv_store/{twin}.yaml"] = {**copy.deepcopy(original), "name": twin}
    return files


def taxonomy(profiles: list[str]) -> dict[str, Any]:
    document = _project_yaml("taxonomy.yaml")
    document["hardware_profiles"] = {k: v for k, v in document["hardware_profiles"].items() if k in profiles}
    return document


def _strategies_of(tree: Tree) -> list[str]:
    return [
        path.removeprefix("strategies/").removesuffix(".yaml")
        for path in tree
        if path.startswith("strategies/")
    ]


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    strategies = draw(strategy_files())
    return {
        "taxonomy.yaml": taxonomy(draw(st.sampled_from(PROFILES))),
        **strategies,
        **draw(store_files()),
        RECIPE: draw(recipes(_strategies_of(strategies))),
    }


@st.composite
def edited(draw: st.DrawFn, tree: Tree) -> Tree:
    """The tree after one edit of one input: a part drawn again (the recipe, the strategies, the KV stores,
    the hardware profiles: changed, added or removed files), or one file removed."""
    part = draw(st.sampled_from(["recipe", "strategies", "stores", "taxonomy", "remove"]))
    changed = dict(tree)
    if part == "recipe":
        changed[RECIPE] = draw(recipes(_strategies_of(tree)))
    elif part == "taxonomy":
        changed["taxonomy.yaml"] = taxonomy(draw(st.sampled_from(PROFILES)))
    elif part == "remove":
        removable = sorted(path for path in tree if path.startswith(("kv_store/", "strategies/")))
        if removable:
            del changed[draw(st.sampled_from(removable))]
    else:
        folder = "strategies/" if part == "strategies" else "kv_store/"
        changed = {path: doc for path, doc in tree.items() if not path.startswith(folder)}
        changed |= draw(strategy_files() if part == "strategies" else store_files())
    return changed


@dataclass(frozen=True)
class Ran:
    """What a command run in this process printed, and its exit status (as subprocess.CompletedProcess)."""

    status: int
    stdout: str
    stderr: str

    @property
    def returncode(self) -> int:
        return self.status

    def lines(self, *starts: str) -> list[str]:
        """The lines of stderr that start with one of `starts` (`error:`, `bad recipe:`)."""
        return [line for line in self.stderr.splitlines() if line.startswith(starts)]


def factory(*args: str, root: Path = ROOT) -> Ran:
    """`factory ARGS` in this process, through the command's own entry point (factory.cli.main): it prints
    what the command prints; an exception it does not report as an error ends the test, as a traceback
    would end the command. Its signal handlers are put back after."""
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGHUP)}
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                status = main(["--root", str(root), *args])
            except SystemExit as exit:  # the command line refused (argparse prints why and exits)
                status = exit.code if isinstance(exit.code, int) else 1
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return Ran(status, out.getvalue(), err.getvalue())


def in_process(root: Path, *args: str, env: dict[str, str] | None = None) -> Ran:
    """tests.conftest.run_factory's counterpart in this process (a second Python costs about a second per
    command here, most of the hostile tests' time): `env` is set for the command only."""
    saved = {name: os.environ.get(name) for name in env or {}}
    os.environ.update(env or {})
    try:
        return factory(*args, root=root)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
