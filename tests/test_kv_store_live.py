"""The tiny model's generated centralized Mooncake KV store, run for real on CPU from its compose files.

The centralized topology as the factory generates it for the CPU target: the Mooncake master, the store
service, two vLLM instances (MooncakeStoreConnector over tcp, the non-CUDA wheel, segments that fit this
machine: the catalog's CPU values) and vllm-router with the cache-aware policy, each started from its own
compose file in the order its header says, with the deployment's settings given as environment (the
addresses; two instances share this host on two loopback addresses), never an edit of a file
(tests/kv_live.py). A long prompt goes through the router; the same prompt then goes to the instance that
did not serve it, which must report external prefix-cache hits: the KV blocks the first instance computed,
read back from the store. The distributed topology and the faults of both: tests/test_kv_store_faults.py.

No RDMA here (tcp), no GPU (the CPU backend): what stays unproven is listed in the README."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from factory.project import Project
from factory.render import compose
from tests import kv_live
from tests.conftest import ROOT, kv_blueprint

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


@pytest.fixture
def started(project: Project, kv_built: Any, tmp_path: Path) -> Iterator[kv_live.Started]:
    """The centralized deployment, from the compose files `factory generate` committed."""
    deployment = kv_blueprint(project).deployment("kv_store_centralized_mooncake")
    with kv_live.running(deployment, ROOT / compose.directory(deployment), tmp_path / "logs") as started:
        yield started


def test_the_centralized_store_serves_one_instances_kv_blocks_to_the_other(started: kv_live.Started) -> None:
    assert len(kv_live.segments()) == 1, f"the store's segment alone: {kv_live.segments()}"
    kv_live.one_instance_reads_what_the_other_stored(started.settings)
