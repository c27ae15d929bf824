"""Load catalog/hardware.yaml and check that every hardware names an install that exists."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from factory.base.errors import InputError
from factory.base.models import Strict
from factory.base.yamlfile import load_model
from factory.catalog.schema import Catalog, DeviationRule


class _Deviations(Strict):
    deviations: list[DeviationRule]


def load_catalog(path: Path) -> Catalog:
    """catalog/hardware.yaml, with catalog/deviations.yaml beside it when it exists."""
    catalog = load_model(Catalog, path)
    deviations = path.with_name("deviations.yaml")
    if deviations.is_file():
        rules = load_model(_Deviations, deviations).deviations
        catalog = catalog.model_copy(update={"deviations": rules})
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
