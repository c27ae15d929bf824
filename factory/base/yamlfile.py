"""Read one YAML file into a typed model, turning every failure into an error that names file and field."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from factory.base.errors import InputError, shown

ModelT = TypeVar("ModelT", bound=BaseModel)
# libyaml's parser where PyYAML was built with it (several times faster on a whole recipes tree).
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# What one file may hold once its aliases are expanded: nodes that aliases add (a few kB of nested anchors
# expand to billions), and nesting (upstream recipes nest 8 deep; libyaml's own limit is 1,000, and Python
# recursion gives out below that). Counted on the composed node graph, where an alias is a reference to its
# anchor's node, so nothing is expanded to count it.
MAX_ALIASED_NODES = 100_000
MAX_DEPTH = 64
_MERGE = "tag:yaml.org,2002:merge"
# Names pydantic puts in an error's location for the member of a union it tried: not field names.
_UNION_MEMBERS = re.compile(r"^(str|int|float|bool|list\[.*|dict\[.*|literal\[.*|function-.*|.*\[.*\])$")


class _Loader(_BaseLoader):  # type: ignore[misc]
    """Safe YAML that refuses a key written twice in one mapping (YAML would keep the last in silence)."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """A scalar whose tag's constructor refuses it (`2026-02-30` is a date that does not exist, `!!int
        abc`, an integer past Python's 4,300 digits) is an error at its place in the file, not a crash."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError, TypeError, KeyError) as exc:
            value = node.value if isinstance(node, yaml.ScalarNode) else node.tag
            what = node.tag.rsplit(":", 1)[-1]
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"{shown(str(value)[:80])} cannot be read as YAML's {what} type: {str(exc)[:120]}",
                node.start_mark,
            ) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:  # `<<: *base`: merged keys may be overridden, that is its purpose
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key that is itself a list or a mapping", key_node.start_mark
                ) from None
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {shown(key)} appears twice in one mapping"
                    f" (first at line {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return dict(super().construct_mapping(node, deep=deep))


# The recipes site reads every file with js-yaml 4 (its default schema: YAML 1.2's core schema, timestamps
# and merge keys), PyYAML with YAML 1.1's: unquoted `yes` and `off` were booleans here, `1:30` was 90 and
# `010` was 8, where the site reads "yes", "off", "1:30" and 10. These are js-yaml 4.3.2's resolvers (read
# from its lib/type/*.js), in its order; timestamps and merge keys stay PyYAML's, which agree with it.
_JS_YAML_INT = r"^[-+]?(?:0b[01]+|0x[0-9a-fA-F]+|0o[0-7]+|[0-9]+)$"
_JS_YAML_SCALARS: list[tuple[str, str, list[str]]] = [
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", _JS_YAML_INT, list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+0123456789."),
    ),
]
_KEPT = {"tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:merge"}
_INT_BASES = {"0b": 2, "0o": 8, "0x": 16}


def _js_yaml_resolvers() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}
    for tag, pattern, first in _JS_YAML_SCALARS:
        for char in first:
            resolvers.setdefault(char or None, []).append((tag, re.compile(pattern)))
    for char, entries in yaml.SafeLoader.yaml_implicit_resolvers.items():
        for tag, regexp in entries:
            if tag in _KEPT:
                resolvers.setdefault(char, []).append((tag, regexp))
    return resolvers


def _construct_int(loader: Any, node: yaml.ScalarNode) -> int:
    """js-yaml's integer: decimal whatever its leading zeros, 0b, 0o and 0x forms, a sign before any. An
    explicit `!!int` holds the same forms only (Python's int() would also take `1_000`, ` 5` or `+-5`)."""
    text = str(loader.construct_scalar(node))
    if not re.fullmatch(_JS_YAML_INT, text):
        raise ValueError(f"not an integer as YAML 1.2 writes one: {text[:40]!r}")
    sign = -1 if text.startswith("-") else 1
    digits = text[1:] if text.startswith(("+", "-")) else text
    base = _INT_BASES.get(digits[:2])
    return sign * (int(digits[2:], base) if base else int(digits, 10))


_Loader.yaml_implicit_resolvers = _js_yaml_resolvers()
_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InputError(f"cannot read the file: {why}", file=path) from exc
    try:
        return _load_bounded(text, path)
    except RecursionError:
        raise InputError("malformed YAML: nested too deeply", file=path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"malformed YAML{where}: {problem}", file=path) from exc


def _load_bounded(text: str, path: Path) -> Any:
    """Compose the document (aliases stay references), measure it, and only then build Python objects."""
    loader = _Loader(text)  # a safe loader (SafeLoader underneath)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node, path)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_size(root: yaml.Node, path: Path) -> None:
    """Refuse a document whose aliases would expand past MAX_ALIASED_NODES, or that nests past MAX_DEPTH,
    before anything is expanded: each distinct node is visited once, its expanded size memoised."""
    sizes: dict[int, int] = {}  # id(node) -> nodes it stands for once every alias in it is expanded
    heights: dict[int, int] = {}  # id(node) -> levels below it, aliases followed
    distinct = 0
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if depth > MAX_DEPTH:  # also ends an alias that contains itself
            raise InputError(f"malformed YAML: nested deeper than {MAX_DEPTH} levels", file=path)
        children = _children(node)
        if children_done:
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
            heights[id(node)] = 1 + max((heights[id(child)] for child in children), default=0)
            distinct += 1
            continue
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in children if id(child) not in sizes)
    if heights[id(root)] > MAX_DEPTH:  # an alias nested inside another alias's anchor, many times over
        raise InputError(f"malformed YAML: nested deeper than {MAX_DEPTH} levels", file=path)
    expanded = sizes[id(root)]
    if expanded - distinct > MAX_ALIASED_NODES:
        raise InputError(
            f"YAML aliases would expand {distinct} nodes to {expanded}: at most {MAX_ALIASED_NODES} nodes"
            " may come from aliases (an alias bomb?)",
            file=path,
        )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def parse_model(model: type[ModelT], data: Any, path: Path, prefix: str = "") -> ModelT:
    """Validate `data` as `model`; the first error becomes an InputError naming the dotted field path."""
    if not isinstance(data, dict):
        raise InputError(
            f"expected a mapping of fields, found {type(data).__name__}", file=path, field=prefix or None
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _as_input_error(exc, model, path, prefix) from None


def load_model(model: type[ModelT], path: Path) -> ModelT:
    return parse_model(model, read_yaml(path), path)


def load_json_model(model: type[ModelT], path: Path, what: str, hint: str) -> ModelT:
    """A JSON file the factory wrote (the lock, the router's lock, the publish record) as `model`; JSON that
    does not parse is named as `what`, with `hint` saying how to make it again."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputError(f"the {what} is not valid JSON: {exc}", file=path, hint=hint) from None
    return parse_model(model, data, path)


def _as_input_error(exc: ValidationError, model: type[BaseModel], path: Path, prefix: str) -> InputError:
    first = exc.errors()[0]
    loc = [str(part) for part in first["loc"] if not _UNION_MEMBERS.match(str(part))]
    field = ".".join([prefix, *loc] if prefix else loc)
    kind = first["type"]
    if kind == "extra_forbidden":
        return InputError(
            "unknown field: the recipes schema has no such key here",
            file=path,
            field=field,
            value=loc[-1],
            valid=_field_names(model, loc[:-1]),
        )
    if kind == "missing":
        return InputError("required field is missing", file=path, field=field)
    valid = None
    expected = first.get("ctx", {}).get("expected")
    if expected:
        valid = [choice.strip(" '") for choice in str(expected).replace(" or ", ",").split(",")]
    return InputError(first["msg"], file=path, field=field, value=first.get("input"), valid=valid)


def _field_names(model: type[BaseModel], loc: list[str]) -> list[str]:
    """The field names allowed at `loc` inside `model`, for the 'valid:' line of an unknown-field error."""
    current: Any = model
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part)
            current = field.annotation if field else None
        else:  # a dict key or list index: step into the value type
            args = get_args(current)
            current = args[-1] if args else None
        current = _without_none(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return []


def _without_none(annotation: Any) -> Any:
    """`X | None` -> X, so optional sections still name their fields."""
    args = [arg for arg in get_args(annotation) if arg is not type(None)]
    if args and get_origin(annotation) in (Union, UnionType):
        return args[0]
    return annotation
