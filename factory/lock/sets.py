"""The locked sets of one `factory lock` run: each (package, release, platform, accelerator, Python) resolved
once with hashes, kept from the previous lock while nothing asks to move it, or recorded with why it
cannot be resolved here. Choosing a release asks for its sets here, so a release that cannot be installed
is known before it is chosen, and every set is resolved at most once per run."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from factory.base.reporter import Reporter
from factory.base.settings import BuildSettings
from factory.catalog.schema import Catalog, Install
from factory.lock import index
from factory.lock.omni import omni_refusal
from factory.lock.resolve import install_sources, resolve_set, wanted_packages
from factory.lockfile.model import (
    OMNI,
    Lock,
    LockedSet,
    set_key,
)
from factory.lockfile.store import set_text


@dataclass
class SetCounts:
    resolved: int = 0
    kept: int = 0
    unresolvable: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LockPlace:
    """What locking reads besides the recipes: the catalog (installs, indexes) and where the lock lives."""

    catalog: Catalog
    lock_path: Path


@dataclass
class SetBook:
    """Every set this run has settled, by key, with its requirements file's text (None: no file)."""

    place: LockPlace
    previous: Lock
    settings: BuildSettings
    upgrading: bool  # `--upgrade` of everything: no set is kept
    same_inputs: bool  # the recipes and the catalog are those the previous lock was made from
    report: Reporter
    counts: SetCounts = field(default_factory=SetCounts)
    settled: dict[str, tuple[LockedSet, str | None]] = field(default_factory=dict)
    _counting: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def get(
        self, install: Install, version: str, platform: str, omni: str | None, fresh: bool = False
    ) -> LockedSet:
        """The set, settled once per run; `fresh`: resolved again rather than kept from the previous lock."""
        want = SetWanted(install, version, platform, omni, fresh)
        if want.key not in self.settled:
            self.settled[want.key] = self._settle(want)
        return self.settled[want.key][0]

    def settle_all(self, wanted: Iterable[SetWanted]) -> None:
        """Settle every set of `wanted` not settled yet, several at once (each resolution is a uv process
        mostly waiting on the index); `get` then answers them from what was settled."""
        todo: dict[str, SetWanted] = {}
        for want in wanted:
            key = want.key
            if key not in self.settled:
                todo.setdefault(key, want)
        done = index.each_at_once(self._settle, list(todo.values()))
        self.settled.update(zip(todo, done, strict=True))

    def text(self, key: str) -> str | None:
        return self.settled[key][1]

    def _settle(self, want: SetWanted) -> tuple[LockedSet, str | None]:
        key, install, version, platform, omni = want.key, want.install, want.version, want.platform, want.omni
        place = self.place
        refused = omni_refusal(place.catalog, install, platform, omni) if omni else None
        if refused is not None:  # no omni set can exist there: say why with the evidence, resolve nothing
            return LockedSet(
                package=install.package, vllm=version, omni=omni, platform=platform, cause=OMNI,
                accelerator=install.accelerator, python=install.python or "", unresolvable=refused,
            ), None  # fmt: skip
        kept = None if want.fresh or self.upgrading else self.previous.sets.get(key)
        local = self.settings.find_links if install.local_wheels else None
        if kept is not None and _local_wheels_gone(kept, local):
            self.report(f"{key}: a wheel the find_links folder served is no longer there: resolving it again")
            kept = None
        if kept is not None and _keep(place, kept, self.same_inputs):
            self._count("kept")
            if kept.missing is None and missing_of(kept) is not None:  # recorded before `missing` existed
                kept = kept.model_copy(update={"missing": missing_of(kept)})
            return kept, set_text(place.lock_path, kept.requirements) if kept.requirements else None
        if kept is not None and kept.requirements and readable(place, kept):
            self.report(f"recording the index of each file of {key}")
            self._count("kept")
            return record_indexes(place, kept, install, self.settings), set_text(
                place.lock_path, kept.requirements
            )
        self.report(f"resolving {key} with uv")
        locked, text = resolve_set(place.catalog, install, version, platform, self.settings, omni)
        with self._counting:
            if locked.unresolvable:
                self.counts.unresolvable.append(f"{key}: {locked.unresolvable}")
        self._count("resolved")
        return locked, text

    def _count(self, what: str) -> None:
        with self._counting:  # settle_all settles in several threads
            setattr(self.counts, what, getattr(self.counts, what) + 1)


@dataclass(frozen=True)
class SetWanted:
    """One set a pass of the choosing will ask for (SetBook.get's arguments)."""

    install: Install
    version: str
    platform: str
    omni: str | None
    fresh: bool

    @property
    def key(self) -> str:
        install = self.install
        python = install.python or ""
        return set_key(install.package, self.version, self.platform, install.accelerator, python, self.omni)


class SetWishes(SetBook):
    """A SetBook that settles nothing: it records every set asked of it, answering with the set the previous
    lock holds or a stand-in that installs. A first pass of the choosing with it learns which sets the real
    pass will ask for, so that they are settled all at once (SetBook.settle_all) rather than one by one."""

    def __init__(self, book: SetBook) -> None:
        super().__init__(
            book.place, book.previous, book.settings, book.upgrading, book.same_inputs, book.report
        )
        self.book = book
        self.wanted: list[SetWanted] = []

    def get(
        self, install: Install, version: str, platform: str, omni: str | None, fresh: bool = False
    ) -> LockedSet:
        want = SetWanted(install, version, platform, omni, fresh)
        self.wanted.append(want)
        if want.key in self.book.settled:
            return self.book.settled[want.key][0]
        kept = None if fresh or self.upgrading else self.previous.sets.get(want.key)
        return kept or LockedSet(package=install.package, vllm=version, omni=omni, platform=platform,
                                 accelerator=install.accelerator, python=install.python or "")  # fmt: skip

    def text(self, key: str) -> str | None:
        return None


def _local_wheels_gone(kept: LockedSet, find_links: Path | None) -> bool:
    """Whether a package the set took from the find_links folder has no wheel there any more (a machine
    without the +cpu torch): its file would fail every build, so the set is resolved again."""
    local = [package for package, where in kept.served.items() if where == index.FIND_LINKS]
    if not local:
        return False
    wheels = find_links.glob("*.whl") if find_links else []
    there = {canonicalize_name(wheel.name.split("-")[0]) for wheel in wheels}
    return any(canonicalize_name(package) not in there for package in local)


def missing_of(locked: LockedSet) -> str | None:
    """The requirement no index serves, when that is why the set cannot be resolved."""
    return locked.missing or (index.not_served(locked.unresolvable) if locked.unresolvable else None)


def record_indexes(
    place: LockPlace, kept: LockedSet, install: Install | None, settings: BuildSettings
) -> LockedSet:
    """A set locked before the lock recorded indexes keeps its file: uv resolves it once more with its own
    pins as constraints, and only which index served each package is taken from that."""
    if install is None:
        sources = index.Sources(default=place.catalog.default_index)
    else:
        sources = install_sources(place.catalog, install, kept.platform, kept.vllm, settings, kept.torch)
    text = set_text(place.lock_path, str(kept.requirements))
    exclude = install.remove_packages if install else []
    wanted = wanted_packages(place.catalog, kept.package, kept.vllm, kept.omni)
    compiled = index.compile_set(
        wanted, kept.platform, kept.python, exclude,
        settings.find_links if install and install.local_wheels else None, sources, pins=text,
    )  # fmt: skip
    return kept.model_copy(update={"served": compiled.served, "indexes": sources.urls})


def _keep(place: LockPlace, kept: LockedSet, same_inputs: bool) -> bool:
    """A resolved set stays while its file is there and it records its indexes. One whose index could not
    be reached is tried again once that index answers here (an unreachable one fails in milliseconds);
    one that could not be resolved otherwise, when the recipes or the catalog changed."""
    if kept.unreachable_index is not None:
        return any(index.unreachable(url) for url in kept.indexes.values())
    if kept.unresolvable:
        return same_inputs
    return readable(place, kept) and bool(kept.served)


def readable(place: LockPlace, kept: LockedSet) -> bool:
    return bool(kept.requirements) and (place.lock_path.parent / str(kept.requirements)).is_file()
