"""`factory show` and `factory list`, run as a user runs them: what they print must be what the images and
compose files do (the same flags, image, settings), for every strategy of the seed recipe."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

from factory.project import Project
from tests.conftest import KIMI, ROOT, TINY, blueprint_of, run_factory

STRATEGIES = ["single_node_tp", "multi_node_tp", "multi_node_tp_pp", "multi_node_tep", "multi_node_dep"]


def sections(text: str) -> dict[str, str]:
    """`## Title` -> its body."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {title: body.strip() for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def shell_words(block: str) -> list[str]:
    """The words of the command a block prints (continuation lines joined); `$NAME` stays as written."""
    command = [line for line in block.replace("\\\n", " ").splitlines() if not line.startswith("export ")]
    return shlex.split(command[0], posix=True) if command else []


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_show_prints_each_nodes_command_as_the_compose_file_runs_it(project: Project, strategy: str) -> None:
    result = run_factory(ROOT, "show", KIMI, "--hardware", "h200", "--strategy", strategy)
    assert result.returncode == 0, result.stderr
    found = sections(result.stdout)
    deployment = blueprint_of(project, KIMI, "h200").deployment(strategy)
    serve = [title for title in found if title.startswith("Serve")]
    assert len(serve) == len(deployment.roles), list(found)
    for title, role in zip(serve, deployment.roles, strict=True):
        words = shell_words(found[title])
        assert words[:2] == ["vllm", "serve"]
        assert words[2:] == role.words, title
        docker = shell_words(found[title.replace("Serve", "Docker")])
        image = blueprint_of(project, KIMI, "h200").image.reference
        assert docker[docker.index(image) + 1 :] == role.words, "docker run passes the same command"
    # One compose file per node, in the roles' order: each runs exactly its own node's command (a head
    # and a worker swapped, or no file listed, fails here).
    compose_paths = found["Compose"].split()
    assert len(compose_paths) == len(deployment.roles), compose_paths
    for path, role in zip(compose_paths, deployment.roles, strict=True):
        if len(deployment.roles) > 1:
            assert path.endswith(f"/{role.name}.compose.yaml"), (path, role.name)
        compose = yaml.safe_load((ROOT / path).read_text())
        command = next(iter(compose["services"].values()))["command"]
        assert command == _compose_form(role.words), path
    assert "uv pip install --require-hashes" in found["Install (what the image runs)"]


def _compose_form(args: list[str]) -> list[str]:
    from factory.render.compose import compose_value

    return [compose_value(arg) for arg in args]


def test_show_lists_the_settings_and_deviations_of_a_multi_node_deployment() -> None:
    result = run_factory(ROOT, "show", KIMI, "--hardware", "h200", "--strategy", "multi_node_dep")
    found = sections(result.stdout)
    settings = next(body for title, body in found.items() if title.startswith("Settings"))
    names = re.findall(r"^([A-Z_]+)=", settings, flags=re.M)
    example = ROOT / "compose/kimi-linear-48b-a3b-instruct/h200-default/multi_node_dep/2-nodes/.env.example"
    assert names == re.findall(r"^([A-Z_]+)=", example.read_text(), flags=re.M), "show and .env.example agree"
    assert "BIND_ADDRESS=127.0.0.1" in settings
    differences = found["Where these commands differ from the recipes site"]
    assert re.search(r"^--host: .*BIND_ADDRESS", differences, flags=re.M), differences


def test_show_json_is_the_rendering_of_one_deployment(project: Project) -> None:
    result = run_factory(ROOT, "show", KIMI, "--hardware", "h200", "--strategy", "multi_node_tp", "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    deployment = blueprint_of(project, KIMI, "h200").deployment("multi_node_tp")
    assert shown["head_argv"] == ["vllm", "serve", *deployment.roles[0].words]
    assert shown["worker_argvs"] == [["vllm", "serve", *deployment.roles[1].words]]
    assert shown["vllm_version"] == "0.11.2" and shown["node_count"] == 2 and shown["buildable"] is True
    assert {d["flag"] for d in shown["deviations"]} == {d.flag for d in deployment.deviations}


def test_show_with_more_nodes_gives_every_node_its_rank() -> None:
    result = run_factory(
        ROOT, "show", KIMI, "--hardware", "h200", "--strategy", "multi_node_tp", "--nodes", "3"
    )
    assert result.returncode == 0, result.stderr
    found = sections(result.stdout)
    ranks = [shell_words(body) for title, body in found.items() if title.startswith("Serve")]
    assert [words[words.index("--node-rank") + 1] for words in ranks] == ["0", "1", "2"]
    assert all(words[words.index("--tensor-parallel-size") + 1] == "24" for words in ranks)


def test_show_amd_prints_what_the_container_needs_to_see_its_gpus() -> None:
    result = run_factory(ROOT, "show", KIMI, "--hardware", "mi300x")
    docker = sections(result.stdout)["Docker"]
    for option in (
        "--device=/dev/kfd",
        "--device=/dev/dri",
        "--group-add ${RENDER_GID}",
        "-e SAFETENSORS_FAST_GPU=1",
    ):
        assert option in docker, option
    assert "RENDER_GID=" in result.stdout


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--hardware", "h999"], "--hardware: unknown hardware"),
        (["--hardware", "h200", "--strategy", "pd_cluster"], "valid: multi_node_dep"),
    ],
)
def test_show_refuses_what_does_not_exist_and_lists_what_does(args: list[str], complaint: str) -> None:
    result = run_factory(ROOT, "show", KIMI, *args)
    assert result.returncode == 2 and complaint in result.stderr, result.stderr
    assert result.stdout == ""


def test_list_names_every_image_and_why_one_cannot_be_built(project: Project) -> None:
    result = run_factory(ROOT, "list")
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert all(len(row) == 3 for row in rows), rows
    images = {row[0]: row for row in rows}
    gb200 = blueprint_of(project, KIMI, "gb200").image
    assert images[gb200.reference][1] == "linux/arm64"
    # vLLM 0.11.2 pins torch 2.9.0, whose aarch64 build on the package index is a CPU build: the line says so,
    # names the index the catalog takes it from, and the first release that needs no other index.
    assert images[gb200.reference][2].startswith("not built (no CUDA torch): ")
    assert "pytorch-cu129" in images[gb200.reference][2]
    assert "vLLM 0.20.0 is the first release" in images[gb200.reference][2]
    tiny = blueprint_of(project, TINY, "cpu").image
    assert images[tiny.reference][2] == tiny.directory.as_posix()
    dockerfiles = {p.parent.relative_to(ROOT).as_posix() for p in ROOT.glob("images/*/*/Dockerfile")}
    assert {row[2] for row in rows if not row[2].startswith("not built")} == dockerfiles
