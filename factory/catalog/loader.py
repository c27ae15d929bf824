"""Load catalog/hardware.yaml and check that every hardware names an install that exists."""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from pathlib import Path

from factory.base.errors import InputError
from factory.base.models import Strict
from factory.base.yamlfile import parse_model, yaml_document
from factory.catalog.schema import Catalog, DeviationRule


class _Deviations(Strict):
    deviations: list[DeviationRule]


# Catalogs read in this process, by the digest of the bytes they were read from (the catalog is a few
# hundred lines of nested models: a run in this process reads it again only when it changed).
_READ: dict[str, Catalog] = {}


def load_catalog(path: Path) -> Catalog:
    """catalog/hardware.yaml, with catalog/deviations.yaml beside it when it exists."""
    deviations = path.with_name("deviations.yaml")
    try:
        data = path.read_bytes()
        rules = deviations.read_bytes() if deviations.is_file() else None
    except OSError as exc:
        raise InputError(f"cannot read the file: {exc.strerror}", file=exc.filename or path) from exc
    key = hashlib.sha256(data + b"\0" + (rules if rules is not None else b"-")).hexdigest()
    if key not in _READ:
        _READ.clear()  # one catalog at a time is what a process reads
        _READ[key] = _checked(_parsed(data, path, rules, deviations), path)
    return _READ[key]


def _parsed(data: bytes, path: Path, rules: bytes | None, deviations: Path) -> Catalog:
    catalog = parse_model(Catalog, yaml_document(data, path), path)
    if rules is not None:
        found = parse_model(_Deviations, yaml_document(rules, deviations), deviations).deviations
        catalog = catalog.model_copy(update={"deviations": found})
    return catalog


def _checked(catalog: Catalog, path: Path) -> Catalog:
    """The catalog, once every name it uses names one of its own entries."""
    for name, hardware in catalog.hardware.items():
        _named(hardware.install, catalog.installs, path, f"hardware.{name}.install", "install")
        _named(hardware.vendor, catalog.vendors, path, f"hardware.{name}.vendor", "vendor")
        install = catalog.installs[hardware.install]
        if install.kind == "pip" and hardware.base_image is None and not install.base_images:
            raise InputError(
                "a pip install needs a base image: the hardware's, or the install's by CUDA version",
                file=path,
                field=f"hardware.{name}.base_image",
            )
    folders = [folder.name for folder in catalog.server.writable]
    for name, vendor in catalog.vendors.items():
        for folder in vendor.writable_gib:
            _named(folder, folders, path, f"vendors.{name}.writable_gib.{folder}", "writable folder")
    for name, install in catalog.installs.items():
        for position, use in enumerate(install.indexes):
            where = f"installs.{name}.indexes[{position}].index"
            _named(use.index, catalog.indexes, path, where, "package index")
        for position, source in enumerate(install.torch_sources):
            for at, index_name in enumerate(source.indexes):
                where = f"installs.{name}.torch_sources[{position}].indexes[{at}]"
                _named(index_name, catalog.indexes, path, where, "package index")
    for model_id, names in catalog.only_hardware.items():
        for index, name in enumerate(names):
            _named(name, catalog.hardware, path, f"only_hardware.{model_id}[{index}]", "hardware")
    if "default" not in catalog.build_recipes:
        raise InputError(
            "the recipe to build by default is missing", file=path, field="build_recipes.default"
        )
    for name in catalog.build_recipes:
        if name != "default" and name not in catalog.hardware:
            raise InputError(
                "unknown hardware",
                file=path,
                field=f"build_recipes.{name}",
                value=name,
                valid=[*catalog.hardware, "default"],
            )
    return catalog


def _named(value: str, known: Collection[str], path: Path, field: str, what: str) -> None:
    """A name that must be one of the catalog's own: else an error naming field, value and the valid names."""
    if value not in known:
        raise InputError(f"unknown {what}", file=path, field=field, value=value, valid=known)
