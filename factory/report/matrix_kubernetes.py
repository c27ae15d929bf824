"""The matrix's Kubernetes column: per row, whether each deployment's manifests were generated (and are
current on disk), and whether a recorded test run checked exactly those bytes
(factory/report/manifest_records.py).

"checked" is never inferred from which tree the manifests belong to: the tests that check manifests
(tests/test_kubernetes.py offline, tests/test_control_plane.py on a control plane) record the digest of
each deployment folder they checked, and a deployment is checked here when a passed record holds the
digest of its files now. A record of other bytes for the folder means they changed since; no record at
all, that no test run is recorded for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from factory.base.outputs import OutputFile, difference
from factory.blueprint import Blueprint
from factory.plan.deployment import Deployment
from factory.render import kubernetes
from factory.render.registry import written
from factory.report.manifest_records import ManifestCheckRecord, folder_digest

KINDS = {
    "single_node": "Deployment",
    "multi_node": "LeaderWorkerSet",
    "pd_cluster": "prefill/decode",
    "kv_store_lb": "KV store",
}
# A deployment's state, in the order the cell names them.
STATES = {
    "checked": "checked",
    "failed": "generated, a recorded check failed",
    "changed": "generated, checked before it changed",
    "unrecorded": "generated, no test run recorded",
}


@dataclass(frozen=True)
class KubernetesCell:
    text: str  # what the table shows
    detail: str  # the tooltip: the records behind it (check, result, date, run), and what is missing


@dataclass(frozen=True)
class _Judged:
    state: str
    cited: tuple[int, ...]  # the records that decided it, by their place in the list (newest first)


def _judge(folder: PurePosixPath, digest: str, records: Sequence[ManifestCheckRecord]) -> _Judged:
    key = folder.as_posix()
    same = [n for n, record in enumerate(records) if record.folders.get(key) == digest]
    failed = tuple(n for n in same if records[n].result == "failed")
    if failed:
        return _Judged("failed", failed)
    if same:
        return _Judged("checked", tuple(same))
    before = tuple(n for n, record in enumerate(records) if key in record.folders)
    return _Judged("changed", before[:1]) if before else _Judged("unrecorded", ())


def _folder_files(blueprint: Blueprint, deployment: Deployment, folder: PurePosixPath) -> list[OutputFile]:
    """The files every format writes into the deployment's folder itself (its manifest, its kustomization,
    its network policy; a component's folder below it is the component's)."""
    return [
        file
        for fmt in written()
        if fmt.writes == kubernetes.ROOT
        for file in fmt.render(blueprint, deployment)
        if file.path.parent == folder
    ]


def _current(out: Path, files: list[OutputFile]) -> bool:
    return all(difference(out / file.path, file) is None for file in files)


def _digest(files: list[OutputFile]) -> str:
    """The digest of the folder's files as generated: the bytes on disk, once _current said they are."""
    return folder_digest({file.path.name: file.content for file in files})


def kubernetes_cell(
    blueprints: list[Blueprint], out: Path, records: Sequence[ManifestCheckRecord]
) -> KubernetesCell:
    """The column for one row (a model's variant on every hardware it was planned for)."""
    counts: dict[str, Counter[str]] = {state: Counter() for state in STATES}
    cited: dict[str, dict[int, list[str]]] = {state: {} for state in STATES}  # record -> its folders
    stale: list[str] = []
    waiting: Counter[str] = Counter()  # a router's deployments whose router is not locked, by kind
    for blueprint in blueprints:
        for deployment in blueprint.deployments:
            if not kubernetes.deployable(deployment):
                waiting[_kind(deployment)] += 1
                continue
            folder = kubernetes.directory(deployment)
            mine = _folder_files(blueprint, deployment, folder)
            if not _current(out, mine):
                stale.append(folder.as_posix())
                continue
            judged = _judge(folder, _digest(mine), records)
            counts[judged.state][_kind(deployment)] += 1
            for n in judged.cited:
                cited[judged.state].setdefault(n, []).append(folder.as_posix())
    if not (any(counts.values()) or stale or waiting):
        return KubernetesCell("", "no deployment planned")
    parts = [f"{STATES[state]}: {_counted(counts[state])}" for state in STATES if counts[state]]
    parts += [f"{len(stale)} stale or missing"] if stale else []
    parts += [f"{_counted(waiting)}: no manifest, the router is not locked"] if waiting else []
    detail = [line for state in STATES for line in _cited(state, counts[state], cited[state], records)]
    detail += [f"stale or missing (run `factory generate`): {', '.join(sorted(stale))}"] if stale else []
    detail += (
        [f"{_counted(waiting)}: no manifest until `factory lock` locks the router (a pod needs its image)"]
        if waiting
        else []
    )
    return KubernetesCell("; ".join(parts), "\n".join(detail))


def _kind(deployment: Deployment) -> str:
    return KINDS[deployment.deploy_type]


def _counted(counts: Counter[str]) -> str:
    """ "2 Deployment, 1 LeaderWorkerSet": one-node first, as the table's legend."""
    return ", ".join(f"{counts[kind]} {kind}" for kind in KINDS.values() if counts[kind])


def _cited(
    state: str, counts: Counter[str], cited: dict[int, list[str]], records: Sequence[ManifestCheckRecord]
) -> list[str]:
    """The tooltip's lines for one state: each record behind it, with the folders it decided."""
    if not counts:
        return []
    if state == "unrecorded":
        return [f"{STATES[state]} for {_counted(counts)}: no record in the reports folder holds these bytes"]
    if state == "changed":
        return [
            f"{STATES[state]}: {', '.join(sorted(folders))} (last recorded: {records[n].cite()})"
            for n, folders in cited.items()
        ]
    return [f"{STATES[state]} ({len(folders)} of them): {records[n].cite()}" for n, folders in cited.items()]
