"""Load catalog/hardware.yaml and check that every hardware names an install that exists."""

from __future__ import annotations

from pathlib import Path

from factory.catalog.schema import Catalog, DeviationRule
from factory.errors import InputError
from factory.models_base import Strict
from factory.yamlfile import load_model


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
        if hardware.install not in catalog.installs:
            raise InputError(
                "unknown install",
                file=path,
                field=f"hardware.{name}.install",
                value=hardware.install,
                valid=catalog.installs,
            )
        if hardware.vendor not in catalog.vendors:
            raise InputError(
                "unknown vendor",
                file=path,
                field=f"hardware.{name}.vendor",
                value=hardware.vendor,
                valid=catalog.vendors,
            )
        install = catalog.installs[hardware.install]
        if install.kind == "pip" and hardware.base_image is None and not install.base_images:
            raise InputError(
                "a pip install needs a base image: the hardware's, or the install's by CUDA version",
                file=path,
                field=f"hardware.{name}.base_image",
            )
    for name, install in catalog.installs.items():
        for position, use in enumerate(install.indexes):
            if use.index not in catalog.indexes:
                raise InputError(
                    "unknown package index",
                    file=path,
                    field=f"installs.{name}.indexes[{position}].index",
                    value=use.index,
                    valid=catalog.indexes,
                )
    for model_id, names in catalog.only_hardware.items():
        for index, name in enumerate(names):
            if name not in catalog.hardware:
                raise InputError(
                    "unknown hardware",
                    file=path,
                    field=f"only_hardware.{model_id}[{index}]",
                    value=name,
                    valid=catalog.hardware,
                )
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
