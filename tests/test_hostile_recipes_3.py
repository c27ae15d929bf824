"""Hostile recipes, round three (issue 30): a value whose YAML tag's constructor refuses it (a date that does
not exist, `!!int abc`, `!!bool maybe`, an integer past Python's 4,300 digits) is that recipe's error alone:
one line naming the file, the place and the value, every other recipe generated, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import small_recipe
from tests.test_hostile_recipes_2 import _only_bad, _tree


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("2026-02-30", "'2026-02-30' cannot be read as YAML's timestamp type: day is out of range for month"),
        ("!!int abc", "'abc' cannot be read as YAML's int type"),
        ("!!bool maybe", "'maybe' cannot be read as YAML's bool type"),
        ("!!float x", "'x' cannot be read as YAML's float type"),
        ("9" * 5000, "cannot be read as YAML's int type: Exceeds the limit (4300 digits)"),
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
