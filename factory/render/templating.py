"""Jinja2 rendering. Templates only format: every value and every choice comes from the plans."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache

import jinja2

from factory.catalog.schema import Server
from factory.image_paths import TEMPLATE_GLOBALS
from factory.plan.models import Deployment, ImageSpec, compose_interpolation, image_labels


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("factory", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # Dockerfiles and YAML, not HTML
    )
    env.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False)
    env.filters["setting"] = compose_interpolation
    env.globals.update(TEMPLATE_GLOBALS)
    return env


def render_dockerfile(image: ImageSpec, inputs_hash: str, server: Server) -> str:
    template = environment().get_template(f"Dockerfile.{image.install_kind}.j2")
    return template.render(image=image, labels=image_labels(image, inputs_hash), server=server)


def render_compose(plan: Deployment, index: int, server: Server) -> str:
    role = plan.roles[index]
    return (
        environment()
        .get_template("compose.yaml.j2")
        .render(
            plan=plan,
            image=plan.image,
            vendor=plan.vendor,
            server=server,
            role_title=plan.role_title(role),
            file_name=plan.file_name(role),
            project_name=plan.project_name(role),
            command=[compose_interpolation(arg) for arg in role.args],
            env={name: compose_interpolation(value) for name, value in plan.env.items()},
            network=plan.network,
            health="http" if role.serves_http else "none",
        )
    )


def render_env_example(plan: Deployment) -> str:
    return environment().get_template("env.example.j2").render(settings=plan.settings_used)


def render_bake(targets: Sequence[object], groups: dict[str, list[str]]) -> str:
    return environment().get_template("docker-bake.hcl.j2").render(targets=targets, groups=groups)
