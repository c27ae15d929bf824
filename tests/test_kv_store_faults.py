"""The tiny model's Mooncake KV stores run on CPU from their generated files, and one process killed.

The distributed topology with two instances (the site's page lets a reader pick two; its default is one):
no store service, each instance gives a segment to the pool. Instance B serves a prompt only instance A saw
from the blocks A left in the pool. Then A is killed with SIGKILL: B keeps serving (no answer fails; until
the master drops A, an answer whose first block sat in A's segment waits for that, see below; after, each
takes at most twice B's usual time), the master drops A within its lease (the generated master's
-client_ttl), and A, started again, gives a new segment to the pool and B finds A's new blocks there. The
centralized topology's store service is killed and started again the same way.

The wait before the drop is vLLM's (0.32.0): an instance whose lookup finds a prompt's first block in a dead
segment retries it until the master drops the segment (vllm pull request 55297, open; 10.1 s measured here
with the 10 s lease). The lease bounds it, and the test holds every answer to it.

Each topology runs in a class of its own, so that one is down before the other starts (they share the
master's ports). Every process's whole log is kept under the test's temporary folder; its end is printed."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from factory.blueprint import plan_recipe
from factory.plan.deployment import Deployment
from factory.project import Project
from factory.render import compose
from tests import kv_live
from tests.conftest import ROOT, TINY, kv_blueprint

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

A, B = kv_live.INSTANCE_ADDRESSES  # instance-1 and instance-2
# The master expires a client at its next check (about every second) past the lease from its last ping
# (every second): a dead one is dropped at most about two seconds past the lease after it dies.
DROP_SLACK_S = 3.0


def lease_of(deployment: Deployment) -> int:
    """The lease the generated master's command gives (-client_ttl=N, seconds)."""
    words = [word for word in deployment.roles[0].argv if word.startswith("-client_ttl=")]
    assert words, f"the master's command states no lease: {deployment.roles[0].argv}"
    return int(words[-1].split("=", 1)[1])


def written(deployment: Deployment, folder: Path) -> Path:
    """The deployment's files as `factory generate` writes them, into a folder of the test's own."""
    for output in compose.files(deployment):
        target = folder / output.path.relative_to(compose.directory(deployment))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(output.content)
    return folder


def usual_time(host: str, tag: str) -> float:
    """The slowest of three answers of `host` to prompts no one asked before (computed, nothing stored)."""
    return max(kv_live.complete(f"http://{host}:8000", kv_live.prompt(f"{tag}{n}"))[1] for n in range(3))


def store_prompts(host: str, tag: str, count: int) -> list[str]:
    """Prompts `host` answered, their blocks written to the pool."""
    keys = kv_live.key_count()
    texts = [kv_live.prompt(f"{tag}{n}") for n in range(count)]
    for text in texts:
        kv_live.complete(f"http://{host}:8000", text)
    assert kv_live.stored_keys(more_than=keys) > keys, "the prompts' blocks were written to the pool"
    return texts


def serve_through_the_loss(host: str, held: list[str], segment: str, lease: int) -> dict[str, Any]:
    """`host` asked the prompts whose blocks the lost process held, then others, until the master dropped its
    segment and three answers more: every answer's time, and when the segment was dropped."""
    watch = kv_live.DropWatch(segment, timeout_s=lease + 60)
    answers: list[tuple[float, float, bool]] = []  # (started after the loss, seconds, after the drop)
    texts = iter([*held, *(kv_live.prompt(f"fresh{n}") for n in range(1000))])
    while sum(1 for _, _, after in answers if after) < 3:
        at = time.monotonic() - watch.began
        assert at < lease + 60, f"the master still lists {segment} {at:.0f} s after it died: {answers}"
        after = watch.dropped_after is not None
        _, took = kv_live.complete(f"http://{host}:8000", next(texts))  # fails the test unless 200
        answers.append((round(at, 2), round(took, 2), after))
        time.sleep(0 if len(answers) < len(held) else 0.5)
    return {"dropped_after_s": watch.join(), "answers": answers}


def assert_served_through(record: dict[str, Any], usual: float, lease: int) -> None:
    dropped = record["dropped_after_s"]
    assert dropped is not None and dropped <= lease + DROP_SLACK_S, (
        f"the master dropped the dead process {dropped} s after it died; its lease is {lease} s: {record}"
    )
    during = [took for _, took, after in record["answers"] if not after]
    after = [took for _, took, after in record["answers"] if after]
    assert all(took <= lease + DROP_SLACK_S for took in during), f"an answer outwaited the lease: {record}"
    assert all(took <= 2 * usual for took in after), f"answers after the drop, usual {usual:.2f} s: {record}"


def blocks_return(writer: str, reader: str, tag: str) -> float:
    """What `reader` finds in the pool of a prompt only `writer` answered: its external hits."""
    before = kv_live.hits(reader)
    [text] = store_prompts(writer, tag, 1)
    kv_live.complete(f"http://{reader}:8000", text)
    return kv_live.hits(reader) - before


def distributed_two(project: Project, folder: Path) -> tuple[Deployment, Path]:
    """The distributed topology with two instances, its files as `factory generate` writes them."""
    plan = plan_recipe(project, project.tree.recipe(TINY), instances=2)
    blueprint = next(b for b in plan.images if b.kv_store and b.image.hardware == "cpu")
    deployment = blueprint.deployment("kv_store_distributed_mooncake")
    assert [role.name for role in deployment.roles] == ["master", "instance-1", "instance-2", "router"]
    return deployment, written(deployment, folder / "deployment")


@pytest.fixture(scope="class")
def started(
    request: pytest.FixtureRequest, project: Project, kv_built: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[kv_live.Started]:
    """The class's topology (its TOPOLOGY), started; taken down when the class's tests are done. The
    centralized one from the compose files `factory generate` committed, without the router (its instances
    are asked directly)."""
    topology: str = request.cls.TOPOLOGY
    folder = tmp_path_factory.mktemp(f"kv-{topology}")
    if topology == "distributed":
        deployment, files = distributed_two(project, folder)
    else:
        deployment = kv_blueprint(project).deployment("kv_store_centralized_mooncake")
        files = ROOT / compose.directory(deployment)
    skip = ("router",) if topology == "centralized" else ()
    with kv_live.running(deployment, files, folder / "logs", skip) as running:
        yield running


class TestTheDistributedTopology:
    TOPOLOGY = "distributed"

    def test_instance_b_serves_a_prompt_only_instance_a_saw_from_the_pool_they_give(
        self, started: kv_live.Started
    ) -> None:
        pool = kv_live.segments()
        assert sorted(name.rsplit(":", 1)[0] for name in pool) == [A, B], f"each instance's segment: {pool}"
        kv_live.one_instance_reads_what_the_other_stored(started.settings)

    def test_a_killed_instance_leaves_the_other_serving_and_rejoins_once_started_again(
        self, started: kv_live.Started
    ) -> None:
        lease = lease_of(started.deployment)
        usual = usual_time(B, "usual")
        held = store_prompts(A, "held", 4)
        [segment] = kv_live.held_by(A)
        started.kill("instance-1")
        record = serve_through_the_loss(B, held, segment, lease)
        print(json.dumps({"lease_s": lease, "usual_s": round(usual, 2), **record}))
        assert_served_through(record, usual, lease)
        assert kv_live.held_by(B), "the survivor's segment stays in the pool"
        started.up("instance-1")
        assert kv_live.held_by(A) not in ([], [segment]), "A gave a new segment to the pool"
        assert blocks_return(A, B, "back") >= 256, "B reads A's new blocks"


class TestTheCentralizedTopology:
    TOPOLOGY = "centralized"

    def test_a_killed_store_leaves_the_instances_serving_and_rejoins_once_started_again(
        self, started: kv_live.Started
    ) -> None:
        lease = lease_of(started.deployment)
        [segment] = kv_live.segments()
        assert re.fullmatch(r"127\.0\.0\.1:\d+", segment), f"the store's segment alone: {segment}"
        usual = usual_time(B, "usual")
        held = store_prompts(A, "held", 4)
        started.kill("store")
        record = serve_through_the_loss(B, held, segment, lease)
        print(json.dumps({"lease_s": lease, "usual_s": round(usual, 2), **record}))
        assert_served_through(record, usual, lease)
        started.up("store")
        assert kv_live.segments() not in ([], [segment]), "the store gave a new segment to the pool"
        assert blocks_return(A, B, "back") >= 256, "B reads A's new blocks from the new store"
