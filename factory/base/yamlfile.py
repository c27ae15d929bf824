"""Read one YAML file into a typed model, turning every failure into an error that names file and field."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from factory.base.errors import InputError, shown
from factory.base.yaml_scalars import CONSTRUCTORS, js_yaml_resolvers

ModelT = TypeVar("ModelT", bound=BaseModel)
# libyaml's parser where PyYAML was built with it (several times faster on a whole recipes tree).
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# What one file may hold once its aliases are expanded: nodes that aliases add (a few kB of nested anchors
# expand to billions), and nesting (upstream recipes nest 8 deep; libyaml's own limit is 1,000, and Python
# recursion gives out below that). Counted on the composed node graph, where an alias is a reference to its
# anchor's node, so nothing is expanded to count it.
MAX_ALIASED_NODES = 100_000
MAX_DEPTH = 64
# What one file may hold at all, counted on the parser's events (a scalar is one, a mapping two): the largest
# upstream file holds 887. A recipe of 200,000 unknown keys took 4.5 s to compose and build before its keys
# were summarised as ignored (issue 43, class 9); counting stops at the bound, so such a file is refused fast.
MAX_EVENTS = 100_000
_MERGE = "tag:yaml.org,2002:merge"
# Names pydantic puts in an error's location for the member of a union it tried: not field names.
_UNION_MEMBERS = re.compile(
    r"^(str|int|float|bool|none|list\[.*|dict\[.*|literal\[.*|function-.*|constrained-.*|.*\[.*\])$"
)


class _Refused(yaml.constructor.ConstructorError):
    """A node the constructor refuses, kept so that the error can name its field."""

    def __init__(self, node: yaml.Node, problem: str) -> None:
        super().__init__(None, None, problem, node.start_mark)
        self.node = node


class _Loader(_BaseLoader):  # type: ignore[misc]
    """Safe YAML that refuses a key written twice in one mapping (YAML would keep the last in silence)."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """A scalar whose tag's constructor refuses it (`2026-02-30` is a date that does not exist, `!!int
        abc`, an integer past Python's 4,300 digits) is an error at its place in the file, not a crash."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError, TypeError, KeyError) as exc:
            what = node.tag.rsplit(":", 1)[-1]
            value = node.value if isinstance(node, yaml.ScalarNode) else f"!!{what}"
            raise _Refused(
                node, f"{shown(str(value)[:80])} cannot be read as YAML's {what} type: {str(exc)[:120]}"
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
                raise _Refused(
                    key_node,
                    f"the key {shown(key)} appears twice in one mapping"
                    f" (first at line {seen[key].start_mark.line + 1})",
                )
            seen[key] = key_node
        return dict(super().construct_mapping(node, deep=deep))


_Loader.yaml_implicit_resolvers = js_yaml_resolvers()
for _tag, _constructor in CONSTRUCTORS.items():
    _Loader.add_constructor(_tag, _constructor)


def read_yaml(path: Path, digests: dict[Path, str] | None = None) -> Any:
    """The file's document; `digests`: where to record the sha256 of the very bytes read (what decides
    whether output made from the file is current: a file read again later may have changed meanwhile)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the file: {exc.strerror}", file=path) from exc
    if digests is not None:
        digests[path] = hashlib.sha256(data).hexdigest()
    return yaml_document(data, path)


def yaml_document(data: bytes, path: Path) -> Any:
    """The document in a file's bytes (`path` names it in errors)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("cannot read the file: not UTF-8 text", file=path) from exc
    try:
        _check_events(text, path)
        return _load_bounded(text, path)
    except RecursionError:
        raise InputError("malformed YAML: nested too deeply", file=path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"malformed YAML{where}: {problem}", file=path) from exc


def _check_events(text: str, path: Path) -> None:
    """Refuse a file past MAX_EVENTS before anything is composed (libyaml's event stream: a fraction of the
    cost of composing, and it stops at the bound)."""
    loader = _BaseLoader(text)
    try:
        count = 0
        while loader.check_event():
            loader.get_event()
            count += 1
            if count > MAX_EVENTS:
                raise InputError(
                    f"the file holds more than {MAX_EVENTS:,} YAML values and collections",
                    file=path,
                    valid=[f"at most {MAX_EVENTS:,} (the largest upstream recipe holds under 1,000)"],
                )
    finally:
        loader.dispose()


def _load_bounded(text: str, path: Path) -> Any:
    """Compose the document (aliases stay references), measure it, and only then build Python objects."""
    loader = _Loader(text)  # a safe loader (SafeLoader underneath)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node, path)
        try:
            return loader.construct_document(node)
        except _Refused as exc:
            mark = exc.node.start_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}"
            problem = f"{exc.problem} ({where})"
            raise InputError(problem, file=path, field=_field_of(node, exc.node) or where) from None
    finally:
        loader.dispose()


def _field_of(root: yaml.Node, target: yaml.Node) -> str | None:
    """The dotted field path (`vllm_args[1]`, `model.base_env.A`) of a node in the document, a key's being
    its own; looked for only once something is refused there."""
    seen: set[int] = set()
    queue: list[tuple[yaml.Node, str]] = [(root, "")]
    while queue:
        node, field = queue.pop(0)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = f"{field}.{key.value}" if field else str(key.value)
                if key is target or value is target:
                    return name
                queue.append((value, name))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                if item is target:
                    return f"{field}[{index}]"
                queue.append((item, f"{field}[{index}]"))
    return None


def _check_size(root: yaml.Node, path: Path) -> None:
    """Refuse a document whose aliases would expand past MAX_ALIASED_NODES, or that nests past MAX_DEPTH,
    before anything is expanded: each distinct collection is visited once, its expanded size memoised. A
    scalar is counted where it is, never visited (most nodes are scalars: 200,000 keys took seconds)."""
    sizes: dict[int, int] = {}  # id(collection) -> nodes it stands for once every alias in it is expanded
    heights: dict[int, int] = {}  # id(collection) -> levels below it, aliases followed
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
            size, height = 1, 1
            for child in children:
                if isinstance(child, yaml.ScalarNode):
                    size, height, distinct = size + 1, max(height, 2), distinct + 1
                else:
                    size, height = size + sizes[id(child)], max(height, 1 + heights[id(child)])
            sizes[id(node)], heights[id(node)] = size, height
            distinct += 1
            continue
        stack.append((node, depth, True))
        stack.extend(
            (child, depth + 1, False)
            for child in children
            if not isinstance(child, yaml.ScalarNode) and id(child) not in sizes
        )
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


def load_model(model: type[ModelT], path: Path, digests: dict[Path, str] | None = None) -> ModelT:
    return parse_model(model, read_yaml(path, digests), path)


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
