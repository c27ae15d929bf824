"""`factory generate`: committed output is current, every file says it is generated, writes are atomic."""

from __future__ import annotations

from pathlib import Path

import pytest

from factory import generate
from tests.conftest import ROOT, run_factory, tree_snapshot


def test_committed_output_is_up_to_date() -> None:
    result = run_factory(ROOT, "generate", "--check")
    assert result.returncode == 0, result.stderr


def test_check_fails_on_a_hand_edit_and_names_the_file(scratch: Path) -> None:
    dockerfile = next((scratch / "images").rglob("Dockerfile"))
    dockerfile.write_text(dockerfile.read_text() + "RUN echo edited\n")
    result = run_factory(scratch, "generate", "--check")
    assert result.returncode == 1
    assert f"changed: {dockerfile.relative_to(scratch).as_posix()}" in result.stderr


def test_generate_removes_what_is_no_longer_generated(scratch: Path) -> None:
    stray = scratch / "images" / "gone" / "Dockerfile"
    stray.parent.mkdir(parents=True)
    stray.write_text("old")
    assert (
        "not generated any more: images/gone/Dockerfile" in run_factory(scratch, "generate", "--check").stderr
    )
    assert run_factory(scratch, "generate").returncode == 0
    assert not stray.exists()
    assert run_factory(scratch, "generate", "--check").returncode == 0


def test_a_failed_write_leaves_the_previous_output(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from factory.blueprint import plan_project
    from factory.project import load_project
    from factory.render.outputs import OutputFile

    project = load_project(scratch)
    files = plan_project(project).files()
    before = tree_snapshot(scratch)
    broken = [*files[:5], OutputFile(files[5].path, None)]  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        generate.write_outputs(scratch, broken)
    assert tree_snapshot(scratch) == before
    assert not [p.name for p in scratch.iterdir() if p.name.startswith(".")], "staging folders left behind"


def test_every_generated_text_file_says_do_not_edit() -> None:
    for path in [*ROOT.glob("images/**/*"), *ROOT.glob("compose/**/*")]:
        if path.is_dir() or path.suffix == ".json" or path.name == ".keep":
            continue
        head = path.read_text().splitlines()[:2]
        assert any(line.startswith("# DO NOT EDIT: ") and "factory generate" in line for line in head), path


def test_image_paths_spell_name_and_tag() -> None:
    dockerfile = ROOT / "images/kimi-linear-48b-a3b-instruct/vllm0.11.2-h200-default/Dockerfile"
    text = dockerfile.read_text()
    assert "FROM ${BASE_IMAGE}" in text
    assert "ARG BASE_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu22.04" in text
    assert "vllm==0.11.2" in text
    assert "# syntax=" not in text
    assert "FACTORY_IMAGE=vllm-factory/kimi-linear-48b-a3b-instruct:vllm0.11.2-h200-default" in text
    assert "ai.vllm.factory.inputs-hash=" in text
    assert "--mount=type=secret,id=cabundle" in text
    assert 'ENTRYPOINT ["factory-serve", "--model", "moonshotai/Kimi-Linear-48B-A3B-Instruct"' in text
