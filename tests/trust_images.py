"""Small images a tamperer pushes beside the published one: a file on `scratch`, a few hundred bytes."""

from __future__ import annotations

import io
import tarfile

import docker

from factory.engine.connect import OWNER_LABEL


def small_image(client: docker.DockerClient, repository: str, tag: str, note: str) -> str:
    """Build `repository:tag` (FROM scratch, one file saying `note`, the tests' owner label)."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        for name, text in (
            ("Dockerfile", f'FROM scratch\nCOPY note /note\nLABEL {OWNER_LABEL}="tests"\n'),
            ("note", note + "\n"),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=f"{repository}:{tag}", rm=True)
    return f"{repository}:{tag}"
