"""`factory generate`: committed output is current, every file says it is generated, writes are atomic."""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

import pytest

from factory.base.errors import InputError
from factory.base.outputs import OutputFile
from factory.generate import writer
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


def test_a_failed_write_leaves_whole_files_and_no_temporary_ones(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from factory.blueprint import plan_project
    from factory.generate.outputs import recipe_files
    from factory.project import load_project

    project = load_project(scratch)
    files = [file for plan in plan_project(project).recipes for file in recipe_files(plan)]
    changed = [OutputFile(f.path, f.content + b"# new\n", f.executable) for f in files[:10]]
    before = tree_snapshot(scratch)
    real_replace, calls = os.replace, []

    def failing_replace(source: str, target: str) -> None:
        calls.append(source)
        if len(calls) == 5:
            raise OSError(28, "No space left on device")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space left"):
        writer.write_outputs(scratch, changed)
    after = tree_snapshot(scratch)
    for file in changed:
        path = file.path.as_posix()
        assert after[path] in (before[path], file.content), f"{path} is neither the old nor the new file"
    assert not list(scratch.rglob("*.tmp")), "temporary files left behind"
    assert set(after) == set(before), "a failed write removed or added files"


def test_unchanged_files_are_compared_not_rewritten(scratch: Path) -> None:
    dockerfile = next((scratch / "images").rglob("Dockerfile"))
    stamp = dockerfile.stat().st_mtime_ns
    result = run_factory(scratch, "generate")
    assert result.returncode == 0 and "(0 written" in result.stdout, result.stdout
    assert dockerfile.stat().st_mtime_ns == stamp


def test_no_write_lands_outside_the_output_folder(scratch: Path) -> None:
    before = tree_snapshot(scratch)
    outside = [
        OutputFile(PurePosixPath("images/../../escaped"), b"x"),
        OutputFile(PurePosixPath("etc/x"), b"x"),
    ]
    for file in outside:
        with pytest.raises(InputError, match="outside the output folder"):
            writer.write_outputs(scratch, [file])
    assert tree_snapshot(scratch) == before and not (scratch.parent / "escaped").exists()


def test_every_generated_text_file_says_do_not_edit() -> None:
    for path in [*ROOT.glob("images/**/*"), *ROOT.glob("compose/**/*"), *ROOT.glob("k8s/**/*")]:
        if path.is_dir() or path.name == ".keep" or path.parent.name == "model":
            continue
        if path.suffix == ".json":
            assert json.loads(path.read_text())["comment"].startswith(
                "DO NOT EDIT: written by `factory generate`"
            )
            continue
        head = path.read_text().splitlines()[:2]
        assert any(line.startswith("# DO NOT EDIT: ") and "factory generate" in line for line in head), path


def test_image_paths_spell_name_and_tag() -> None:
    dockerfile = ROOT / "images/kimi-linear-48b-a3b-instruct/vllm0.11.2-h200-default/Dockerfile"
    text = dockerfile.read_text()
    assert "FROM ${BASE_IMAGE}" in text
    assert "ARG BASE_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu22.04" in text
    assert "--require-hashes --no-deps" in text and "requirements/heavy.txt" in text
    requirements = (dockerfile.parent / "requirements" / "requirements.txt").read_text()
    assert "vllm==0.11.2 \\\n    --hash=sha256:" in requirements, (
        "vLLM comes from the locked set, with hashes"
    )
    assert "torch==2.9.0" in (dockerfile.parent / "requirements" / "heavy.txt").read_text()
    assert "# syntax=" not in text
    assert "FACTORY_IMAGE=vllm-factory/kimi-linear-48b-a3b-instruct:vllm0.11.2-h200-default" in text
    assert "ai.vllm.factory.inputs-hash=" in text
    assert "--mount=type=secret,id=cabundle" in text
    assert 'ENTRYPOINT ["factory-serve"]' in text
    assert 'CMD ["moonshotai/Kimi-Linear-48B-A3B-Instruct", "--trust-remote-code"' in text
