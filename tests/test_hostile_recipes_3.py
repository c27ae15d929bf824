"""Hostile recipes, round three (issue 30): a value whose YAML tag's constructor refuses it (a date that does
not exist, `!!int abc`, `!!bool maybe`, an integer past Python's 4,300 digits) is that recipe's error alone:
one line naming the file, the place and the value, every other recipe generated, no traceback."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from factory.base.errors import InputError
from factory.base.files import write_text_atomic
from factory.base.yamlfile import read_yaml
from factory.generate.memory import recipe_inputs
from factory.generate.run import generate
from factory.plan.context import image_outputs
from factory.project import Project, load_project
from factory.recipes import bundled
from factory.recipes.loader import load_tree
from tests import kubernetes_checks as checks
from tests.conftest import ROOT, TINY, blueprint_of, kubectl, small_recipe
from tests.hostile_trees import Ran, in_process
from tests.test_hostile_recipes_2 import _generate, _only_bad, _tree


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("2026-02-30", "'2026-02-30' cannot be read as YAML's timestamp type: day is out of range for month"),
        ("!!int abc", "'abc' cannot be read as YAML's int type"),
        ("!!bool maybe", "'maybe' cannot be read as YAML's bool type"),
        ("!!float x", "'x' cannot be read as YAML's float type"),
        # An integer past Python's 4,300 digits was refused here; since round four (issue 43) it is text, as
        # js-yaml reads every number past a double (tests/test_hostile_recipes_4.py).
    ],
)
def test_a_value_its_yaml_tag_refuses_is_that_recipes_error_alone(
    tmp_path: Path, value: str, said: str
) -> None:
    recipes = _tree(tmp_path, {"acme/Small-8B": small_recipe()})
    path = recipes / "models" / "acme" / "Small-8B.yaml"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("meta:\n", f"meta:\n  date_updated: {value}\n", 1), encoding="utf-8")
    _, line = _only_bad(tmp_path, recipes, str(path), "line 2", said)
    assert len(line) < 400, "one line, the value cut short"


def _named(slug: str, model: str) -> dict[str, object]:
    recipe = small_recipe(meta={"title": slug, "slug": slug, "hardware": {}})
    recipe["model"] = {**recipe["model"], "model_id": model}  # type: ignore[dict-item]
    return recipe


@pytest.mark.parametrize(
    ("other", "fold"),
    [
        ("tiny_random_llama", "compose project name 'tiny-random-llama'"),
        ("tiny.random.llama", "compose project name 'tiny-random-llama'"),
        ("tiny._random-llama", "Kubernetes name 'tiny-random-llama'"),
    ],
)
def test_slugs_that_an_output_folds_together_are_both_refused(tmp_path: Path, other: str, fold: str) -> None:
    """Accepted before, then folded to one compose project name or Kubernetes object name: starting one
    deployment replaced the other's containers or objects."""
    recipes = _tree(
        tmp_path,
        {
            "acme/One-8B": _named("tiny-random-llama", "acme/One-8B"),
            "acme/Two-8B": _named(other, "acme/Two-8B"),
        },
    )
    result, out, bad = _generate(tmp_path, recipes)
    assert result.returncode == 1, result.stderr
    assert len(bad) == 2 and all(f"2 recipes claim the {fold}" in line for line in bad), bad
    assert all("One-8B.yaml" in line and "Two-8B.yaml" in line for line in bad), "each names both files"
    assert (out / "compose" / "good").is_dir(), "the other recipes are generated"


@pytest.mark.parametrize("slug", ["vllm-router", "docker-bake.hcl"])
def test_a_slug_that_is_the_name_of_the_factorys_own_entry_is_refused(tmp_path: Path, slug: str) -> None:
    recipes = _tree(tmp_path, {"acme/One-8B": _named(slug, "acme/One-8B")})
    _, line = _only_bad(tmp_path, recipes, f"the image name {slug!r} is the factory's own")
    assert "meta.slug" in line


@pytest.mark.parametrize(
    ("names", "fold"),
    [
        (["v1.0", "v1-0"], "compose project name 'v1-0'"),
        (["v1_0", "v1-0"], "compose project name 'v1-0'"),
        (["v1+0", "v1-0"], "Kubernetes name 'v1-0'"),
        (["Fast", "fast"], "compose project name 'fast'"),
    ],
)
def test_variants_that_an_output_folds_together_refuse_their_recipe(
    tmp_path: Path, names: list[str], fold: str
) -> None:
    """Accepted before, then folded to one compose project and one set of Kubernetes objects: starting one
    variant's deployment replaced the other's."""
    recipe = small_recipe()
    default = recipe["variants"]["default"]  # type: ignore[index]
    recipe["variants"] = {"default": default, **{name: dict(default) for name in names}}
    _, line = _only_bad(tmp_path, _tree(tmp_path, {"acme/Small-8B": recipe}), f"share the {fold}")
    assert "variants" in line and all(repr(name) in line for name in names), line


def test_two_ids_that_differ_only_in_case_are_each_reachable_by_its_own(tmp_path: Path) -> None:
    """Both were unreachable by their exact id ("matches more than one recipe"); a name in another case
    still matches both and is refused, naming them."""
    recipes = _tree(
        tmp_path,
        {
            "acme/Small-8B": _named("small-a", "acme/Small-8B"),
            "acme/small-8b": _named("small-b", "acme/small-8b"),
        },
    )
    tree = load_tree(recipes)
    assert tree.recipe("acme/Small-8B").recipe_id == "acme/Small-8B"
    assert tree.recipe("acme/small-8b").recipe_id == "acme/small-8b"
    with pytest.raises(InputError, match="more than one recipe"):
        tree.recipe("ACME/SMALL-8B")


def test_a_catalog_with_no_gpus_per_node_is_refused_naming_the_field(scratch: Path) -> None:
    """`gpus_per_node: 0` planned 0 GPUs for every process of that hardware; a count is range-checked like
    a recipe's."""
    catalog = scratch / "catalog" / "hardware.yaml"
    catalog.write_text(catalog.read_text().replace("    gpus_per_node: 8", "    gpus_per_node: 0", 1))
    result = in_process(scratch, "generate")
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "hardware.yaml" in result.stderr and "gpus_per_node" in result.stderr, result.stderr[-2000:]


def test_a_character_past_u_ffff_reaches_the_manifest_as_yaml_escapes_it(tmp_path: Path) -> None:
    """JSON's surrogate-pair escape ("\\ud83d\\ude00") made `kubectl kustomize` refuse the manifest; YAML's
    \\U escape reads back as the character."""
    recipe = small_recipe()
    recipe["model"]["base_env"] = {"GREETING": "hi \U0001f600"}  # type: ignore[index]
    recipes = _tree(tmp_path, {"acme/Small-8B": recipe})
    result, out, _ = _generate(tmp_path, recipes)
    manifests = [m for m in sorted((out / "k8s").rglob("manifest.yaml")) if "small" in m.as_posix()]
    assert manifests, result.stderr[-2000:]
    text = manifests[0].read_text()
    assert "\\ud83d" not in text and "\\U0001F600" in text
    rendered = subprocess.run(
        [kubectl(), "kustomize", str(manifests[0].parent)], capture_output=True, text=True, check=False
    )
    assert rendered.returncode == 0, rendered.stderr
    assert "hi \U0001f600" in str(list(yaml.safe_load_all(rendered.stdout)))


@pytest.mark.parametrize("character", ["\ufffe", "\uffff"])
def test_a_noncharacter_no_yaml_file_may_carry_refuses_its_recipe(tmp_path: Path, character: str) -> None:
    """U+FFFE and U+FFFF passed into files compose and kustomize then refused ("control characters are not
    allowed"), written or escaped."""
    recipe = small_recipe()
    recipe["model"]["base_env"] = {"A": f"a{character}b"}  # type: ignore[index]
    _, line = _only_bad(tmp_path, _tree(tmp_path, {"acme/Small-8B": recipe}), "model.base_env.A")
    assert "no YAML file may carry it" in line, line


def test_a_dockerfile_line_over_docker_s_limit_in_bytes_is_refused(project: Project) -> None:
    """Each value is limited in characters; twenty of 4,000 two-byte characters made a CMD line of about
    160 kB, which Docker's parser refuses (lines of at most 65,535 bytes)."""
    image = blueprint_of(project, TINY, "cpu").image
    assert image.install is not None
    long = image.model_copy(update={"default_command": [*image.default_command, *["é" * 4000] * 20]})
    with pytest.raises(InputError, match="Docker refuses lines over 65,535") as refused:
        image_outputs(long, "0" * 64, None)
    assert refused.value.file == image.recipe_file
    assert image_outputs(image, "0" * 64, None), "the image as it is renders"


# Plain scalars YAML 1.1 and 1.2 read apart, and what the site's reader (js-yaml 4.3.2, read 2026-12-03
# through the shared oracle's node_modules) makes of each.
SCALARS = {
    "yes": "yes", "off": "off", "y": "y", "1:30": "1:30", "010": 10, "0o10": 8, "0x1F": 31,
    "-0x10": -16, "0b101": 5, "1_000": "1_000", "012345678": 12345678, "TRUE": True, "Null": None,
    "~": None, "=": "=", "+12": 12, ".5": 0.5,
}  # fmt: skip


def test_plain_scalars_are_read_as_the_site_reads_them(tmp_path: Path) -> None:
    """PyYAML read `yes`, `off`, `1:30`, `010` as true, false, 90 and 8; the site keeps the first three and
    reads 10. Where the oracle and node are here, the expected values are asked of its js-yaml itself."""
    document = "".join(f"k{n}: {text}\n" for n, text in enumerate(SCALARS))
    path = tmp_path / "scalars.yaml"
    path.write_text(document)
    ours = read_yaml(path)
    assert ours == {f"k{n}": value for n, value in enumerate(SCALARS.values())}
    oracle, node = os.environ.get("FACTORY_RECIPES_ORACLE"), shutil.which("node")
    if oracle and node:
        js_yaml = Path(oracle).parent / "node_modules" / "js-yaml" / "index.js"
        script = (
            f"import y from {json.dumps(str(js_yaml))}; console.log(JSON.stringify(y.load(process.argv[1])))"
        )
        read = subprocess.run(
            [node, "--input-type=module", "-e", script, document], capture_output=True, text=True, check=True
        )
        assert json.loads(read.stdout) == ours
    elif os.environ.get("FACTORY_REQUIRE_UPSTREAM"):
        pytest.fail("the oracle's js-yaml and node are needed to compare with the site's reader")


# Environment names and values that YAML readers take for something else when written plain, and what each
# must reach the process as. The last four are written unquoted in the recipe: YAML 1.2 makes them a
# boolean, numbers and text, and the site shows them as `true`, `1`, `10` and `yes`.
ENV_NAMES = ["null", "true", "false", "yes", "no", "on", "off", "y", "n", "Y", "NULL", "True", "Null", "_"]
ENV_VALUES = {
    "A_TILDE": "~", "A_FLOAT": "1.0", "A_INT": "010", "A_OCT": "0o17", "A_HEX": "0x1F", "A_EXP": "1e3",
    "A_INF": ".inf", "A_NAN": ".nan", "A_EMPTY": "", "A_SPACE": " ", "A_COLON": "a: b", "A_HASH": "#x",
    "A_DASH": "-", "A_TIME": "1:30", "A_DATE": "2026-12-03", "A_MERGE": "<<", "A_ANCHOR": "&a",
    "A_ALIAS": "*a", "A_TAG": "!x", "A_PIPE": "|", "A_MAP": "{}", "A_LIST": "[]", "A_NULL": "null",
}  # fmt: skip
ENV_PLAIN = {
    "B_TRUE": ("true", "true"), "B_FLOAT": ("1.0", "1"), "B_INT": ("010", "10"), "B_YES": ("yes", "yes"),
}  # fmt: skip


def _compose_environment(file: Path) -> dict[str, str]:
    """The service's environment as Compose v2 itself reads the file (`docker compose config`)."""
    settings = {"HEAD_IP": "10.0.0.1", "IFACE_NAME": "eth0", "RENDER_GID": "110", "MASTER_PORT": "29501"}
    read = subprocess.run(
        ["docker", "compose", "-f", str(file), "config", "--format", "json"],
        capture_output=True, text=True, env={**os.environ, **settings}, check=False, timeout=60,
    )  # fmt: skip
    assert read.returncode == 0, f"{file}: {read.stderr}"
    (service,) = json.loads(read.stdout)["services"].values()
    return dict(service["environment"])


def _kubectl_environments(folder: Path) -> list[dict[str, str]]:
    """Each pod template's environment as kubectl reads what `kubectl kustomize` prints (`kubectl label
    --local` parses it with the reader `kubectl apply` uses, and prints JSON; no cluster needed)."""
    printed = subprocess.run(
        [kubectl(), "kustomize", str(folder)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    read = subprocess.run(
        [kubectl(), "label", "--local", "-f", "-", "probe=1", "-o", "json"],
        input=printed, capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    found, decoder, at = [], json.JSONDecoder(), 0
    while read[at:].strip():
        document, at = decoder.raw_decode(read, len(read) - len(read[at:].lstrip()))
        for template in checks.pod_templates(document):
            env = template[1]["spec"]["containers"][0].get("env", [])
            found.append({e["name"]: e["value"] for e in env if "value" in e})
    return found


def test_environment_names_and_values_yaml_could_misread_reach_compose_and_kubectl_as_written(
    tmp_path: Path,
) -> None:
    """Names were written plain in compose files: Compose refused `true:` ("non-string key in
    services.vllm.environment"). Every name and value is read back, by the real Compose and kubectl,
    as the same string, in every compose file and kustomization of the recipe."""
    expected = {name: name for name in ENV_NAMES} | ENV_VALUES
    expected |= {name: shown for name, (_, shown) in ENV_PLAIN.items()}
    recipes = _tree(tmp_path, {"acme/Small-8B": small_recipe()})
    path = recipes / "models" / "acme" / "Small-8B.yaml"
    lines = [f"    {json.dumps(name)}: {json.dumps(value)}" for name, value in expected.items()]
    lines[-len(ENV_PLAIN) :] = [f"    {name}: {written}" for name, (written, _) in ENV_PLAIN.items()]
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("  base_args:", "  base_env:\n" + "\n".join(lines) + "\n  base_args:", 1))
    result, out, bad = _generate(tmp_path, recipes)
    assert result.returncode == 0 and not bad, result.stderr[-2000:]
    composed = sorted((out / "compose" / "small").rglob("*compose.yaml"))
    folders = sorted(p.parent for p in (out / "k8s" / "small").rglob("manifest.yaml"))
    assert len(composed) >= 20 and len(folders) >= 15, (len(composed), len(folders))
    for file in composed:
        environment = _compose_environment(file)
        assert {name: environment.get(name) for name in expected} == expected, file
    templates = [env for folder in folders for env in _kubectl_environments(folder)]
    assert len(templates) >= len(folders)
    for environment in templates:
        assert {name: environment.get(name) for name in expected} == expected


# --- links and special files at the edges -----------------------------------------------------------------


def _one_error(result: Ran, *expected: str) -> str:
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and all(text in lines[0] for text in expected), result.stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize("folder", ["strategies", "kv_store"])
def test_a_shared_folder_that_is_a_link_is_refused(tmp_path: Path, folder: str) -> None:
    """It was read silently, from wherever it pointed."""
    recipes = _tree(tmp_path)
    outside = tmp_path / "elsewhere"
    if (recipes / folder).exists():
        shutil.move(recipes / folder, outside)
    else:
        outside.mkdir()
    (recipes / folder).symlink_to(outside)
    result = in_process(ROOT, "generate", "--recipes", str(recipes), "--out", str(tmp_path / "out"))
    _one_error(result, "a symlink", folder)


def test_a_fifo_among_the_strategies_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Opening it waited for a writer forever."""
    recipes = _tree(tmp_path)
    os.mkfifo(recipes / "strategies" / "stuck.yaml")
    result = in_process(ROOT, "generate", "--recipes", str(recipes), "--out", str(tmp_path / "out"))
    _one_error(result, "not a regular file", "stuck.yaml")


def test_a_generated_file_replaced_by_a_link_or_a_fifo_is_rewritten_without_reading_it(scratch: Path) -> None:
    """A link to /dev/zero at a generated file's path was read until memory ran out; a FIFO hung the run."""
    compose_file = (
        scratch / "compose" / "tiny-random-llama" / "cpu-default" / "single_node_tp" / "compose.yaml"
    )
    kustomization = scratch / "k8s" / "tiny-random-llama" / "cpu-default" / "single_node_tp"
    expected = {path: path.read_bytes() for path in (compose_file, kustomization / "manifest.yaml")}
    compose_file.unlink()
    compose_file.symlink_to("/dev/zero")
    (kustomization / "manifest.yaml").unlink()
    os.mkfifo(kustomization / "manifest.yaml")
    checked = in_process(scratch, "generate", "--check")
    assert checked.returncode == 1 and "missing" in checked.stdout + checked.stderr, checked.stderr[-2000:]
    result = in_process(scratch, "generate")
    assert result.returncode == 0, result.stderr[-2000:]
    for path, content in expected.items():
        assert not path.is_symlink() and path.is_file() and path.read_bytes() == content, path


def test_a_link_at_the_temporary_name_is_not_written_through(tmp_path: Path) -> None:
    """The cache's temporary file had a fixed name: a link planted there made the run overwrite the file it
    pointed to, outside the project."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "out" / "cache.json"
    target.parent.mkdir()
    (target.parent / f".{target.name}.{os.getpid()}.tmp").symlink_to(victim)
    write_text_atomic(target, "{}")
    assert victim.read_text() == "keep me" and target.read_text() == "{}"
    assert [p.name for p in target.parent.iterdir()] == ["cache.json"]


def test_a_folder_where_a_generated_file_goes_ends_in_one_line(scratch: Path) -> None:
    """It ended in a traceback from the writer's thread."""
    compose_file = (
        scratch / "compose" / "tiny-random-llama" / "cpu-default" / "single_node_tp" / "compose.yaml"
    )
    compose_file.unlink()
    (compose_file / "inside").mkdir(parents=True)
    result = in_process(scratch, "generate")
    _one_error(result, "compose.yaml")


# --- bounded work ------------------------------------------------------------------------------------------


def test_ten_thousand_variants_refuse_their_recipe_at_once(tmp_path: Path) -> None:
    """They were planned, an image per hardware each, for over a minute."""
    recipe = small_recipe()
    default = recipe["variants"]["default"]  # type: ignore[index]
    recipe["variants"] = {"default": default, **{f"v{n}": dict(default) for n in range(10_000)}}
    _, line = _only_bad(tmp_path, _tree(tmp_path, {"acme/Small-8B": recipe}), "10,001 variants", "at most 64")
    assert "variants" in line


def test_a_large_bundled_model_folder_or_recipe_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """Bundled files were read whole, twice (a 4 GB file: MemoryError). Sparse files: no disk is used."""
    recipes = _tree(tmp_path, {"acme/Small-8B": small_recipe(), "acme/Big-8B": small_recipe()})
    bundled = recipes / "models" / "acme" / "Small-8B"
    bundled.mkdir()
    with (bundled / "model.safetensors").open("wb") as sparse:
        sparse.truncate(4 * 2**30)
    with (recipes / "models" / "acme" / "Big-8B.yaml").open("ab") as grown:
        grown.truncate(8 * 2**20)
    result, _, bad = _generate(tmp_path, recipes)
    assert result.returncode == 1 and len(bad) == 2, result.stderr[-2000:]
    assert any("bundled model folder holds over" in line and "model.safetensors" in line for line in bad)
    assert any("a recipe file may have at most" in line and "Big-8B.yaml" in line for line in bad)


def test_bundled_files_are_hashed_in_chunks_and_never_read_past_the_limit(
    tmp_path: Path, project: Project
) -> None:
    """The cache key read each bundled file whole (a 48 MB file: 48 MB held at once), and the build context
    read whatever the file had become since the recipe was read: a file grown past the limit, whole."""
    recipes = _tree(tmp_path, {"acme/Small-8B": small_recipe()})
    folder = recipes / "models" / "acme" / "Small-8B"
    folder.mkdir()
    weights = folder / "model.safetensors"
    weights.write_bytes(os.urandom(48 * 2**20))
    tree = load_tree(recipes)
    loaded = tree.recipes["acme/Small-8B"]
    tracemalloc.start()
    try:
        key = recipe_inputs(project, loaded, "shared")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"hashing a 48 MB bundled file held {peak:,} bytes at once"
    weights.write_bytes(b"changed")
    assert recipe_inputs(project, loaded, "shared") != key  # the bytes are in the key, not only the names
    (_, copy), *_ = bundled.listed(loaded.bundled_model_dir)
    with weights.open("ab") as grown:  # grown since the recipe was read: sparse, no disk used
        grown.truncate(bundled.MAX_BUNDLED_BYTES + 1)
    with pytest.raises(InputError, match="bundled model folder holds over") as refused:
        bundled.listed(loaded.bundled_model_dir)
    assert "model.safetensors" in str(refused.value)
    read = 0
    with pytest.raises(InputError, match="changed while generate ran") as changed:  # listed before it grew
        for chunk in copy.chunks():
            read += len(chunk)
    assert read <= copy.size and "model.safetensors" in str(changed.value)


def _tiny_with_bundled(tmp_path: Path, size: int) -> Project:
    """The tiny model's recipe alone in a tree (the project's lock builds it), its bundled folder holding
    one more file of `size` random bytes."""
    tree = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes" / "strategies", tree / "strategies")
    shutil.copy(ROOT / "recipes" / "taxonomy.yaml", tree / "taxonomy.yaml")
    (tree / "models" / "factory").mkdir(parents=True)
    recipe = ROOT / "recipes" / "models" / "factory" / "tiny-random-llama.yaml"
    shutil.copy(recipe, tree / "models" / "factory")
    shutil.copytree(recipe.with_suffix(""), tree / "models" / "factory" / "tiny-random-llama")
    (tree / "models" / "factory" / "tiny-random-llama" / "extra.bin").write_bytes(os.urandom(size))
    return load_project(ROOT, tree, tmp_path / "out", lock=ROOT / "recipes" / "lock" / "vllm.lock.json")


def _peak(run: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_bundled_file_reaches_the_build_context_as_a_streamed_copy(tmp_path: Path) -> None:
    """The build context held every bundled file's bytes (a 48 MB file: 102 MB at the peak of generate),
    and --check read the copy on disk whole beside them. Now both copy and compare in 1 MiB chunks."""
    project = _tiny_with_bundled(tmp_path, 48 * 2**20)
    wrote = _peak(lambda: generate(project))
    source = project.tree.root / "models" / "factory" / "tiny-random-llama" / "extra.bin"
    (copy,) = (project.out / "images").rglob("model/extra.bin")
    assert filecmp.cmp(source, copy, shallow=False), "the copy has the bundled file's bytes"
    shutil.rmtree(project.out / ".factory-cache")  # so --check plans again and compares every file
    checked = _peak(lambda: generate(project, check=True))
    assert [line for line in generate(project, check=True).stale if "images/" in line] == []
    assert wrote < 12 * 2**20, f"generate with a 48 MB bundled file held {wrote:,} bytes at its peak"
    assert checked < 12 * 2**20, f"generate --check held {checked:,} bytes at its peak"


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("default_instances", "0", "default_instances"),
        ("router", "{port: 70000}", "router.port"),
        ("vllm", "{install: [a, b]}", "vllm.install"),
        ("mooncake_vllm_config", "{template: {protocol: [rdma]}}", "mooncake_vllm_config.template.protocol"),
    ],
)
def test_a_kv_store_file_the_factory_now_reads_is_refused_in_one_line(
    tmp_path: Path, field: str, value: str, said: str
) -> None:
    """The kv_store files are read for the KV-store renderings since this round: a value of the wrong
    type or range is shared input, so the run stops with one line naming the file and the field."""
    recipes = _tree(tmp_path)
    folder = recipes / "kv_store"
    folder.mkdir(exist_ok=True)
    (folder / "kv_bad.yaml").write_text(f"name: kv_bad\ndeploy_type: kv_store_lb\n{field}: {value}\n")
    result = in_process(ROOT, "generate", "--recipes", str(recipes), "--out", str(tmp_path / "out"))
    _one_error(result, "kv_bad.yaml", said)


def test_a_kv_store_file_named_unlike_its_name_is_refused(tmp_path: Path) -> None:
    """The site keys KV stores by `name`, the factory's renderings by file: two files claiming one name
    would render as one on the site and as two here."""
    recipes = _tree(tmp_path)
    (recipes / "kv_store").mkdir(exist_ok=True)
    (recipes / "kv_store" / "kv_one.yaml").write_text("name: kv_other\ndeploy_type: kv_store_lb\n")
    result = in_process(ROOT, "generate", "--recipes", str(recipes), "--out", str(tmp_path / "out"))
    _one_error(result, "kv_one.yaml", "must match its file name")
