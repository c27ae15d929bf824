"""Releases that cannot be installed. A release the recipe accepts but did not ask for exactly is passed
over when one of its sets needs a requirement no index the install names serves (vLLM 0.34.0 requires
`flashinfer-python==0.7.3`, which PyPI never published): the lock takes the newest release that installs,
and records each one passed over with the requirement and the indexes' answer for it. A passed-over release
is resolved again only when that answer changes, or when the user asks (`--refresh`, `--upgrade`).

A release asked for exactly (a `vllm==X` pin, the release a `docker_image` tag names) is never passed over:
it stays unbuildable, with the cause."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from packaging.version import Version

from factory.catalog.schema import Install
from factory.lock import index
from factory.lock.choose import Ask
from factory.lock.resolve import install_sources
from factory.lock.sets import SetBook
from factory.lockfile.model import PassedOver, Release, set_key


@dataclass
class Answers:
    """The indexes' answer for a requirement on a platform, asked at most once per run."""

    book: SetBook
    asked: dict[tuple[str, str, str, str], str | None] = field(default_factory=dict)

    def changed(self, record: PassedOver, install: Install) -> bool:
        """Whether the indexes now answer the record's requirement otherwise than when it was passed over
        (an index that does not answer changes nothing: the release stays passed over)."""
        key = (record.requirement, record.platform, install.python or "", install.package)
        if key not in self.asked:
            book = self.book
            sources = install_sources(
                book.place.catalog, install, record.platform, record.vllm, book.settings
            )
            find_links = book.settings.find_links if install.local_wheels else None
            book.report(f"asking the indexes for {record.requirement} ({record.platform})")
            try:
                self.asked[key] = index.answer(
                    record.requirement, record.platform, install.python or "", find_links, sources
                )
            except index.IndexUnavailable:
                self.asked[key] = record.answer
        return self.asked[key] != record.answer


def first_installable(
    pick: Callable[[list[Version]], Release],
    listed: list[Version],
    request: Ask,
    install: Install,
    platforms: set[str],
    known: dict[str, PassedOver],
    answers: Answers,
    fresh: bool,
) -> tuple[Release, dict[str, PassedOver]]:
    """The release `pick` takes among `listed`, passing over each whose set for one of `platforms` needs a
    requirement no index serves. `known`: the releases passed over before, trusted while the indexes
    answer their requirement as recorded (`fresh`: resolved again whatever the answer)."""
    book = answers.book
    passed: dict[str, PassedOver] = {}
    while True:
        chosen = pick(listed)
        if chosen.vllm is None or install.kind != "pip" or request.exact is not None:
            break
        blocked = _blocked(book, chosen, install, platforms, known, answers, fresh)
        if blocked is None:
            break
        passed[set_key_of(blocked, install, chosen)] = blocked
        listed = [version for version in listed if str(version) != chosen.vllm]
    if not passed:
        return chosen, passed
    notes = "; ".join(record.describe() for record in passed.values())
    return chosen.model_copy(update={"passed_over": list(passed), "why": f"{chosen.why}; {notes}"}), passed


def set_key_of(record: PassedOver, install: Install, chosen: Release) -> str:
    return set_key(install.package, record.vllm, record.platform, install.accelerator, install.python or "",
                   chosen.omni)  # fmt: skip


def _blocked(
    book: SetBook,
    chosen: Release,
    install: Install,
    platforms: set[str],
    known: dict[str, PassedOver],
    answers: Answers,
    fresh: bool,
) -> PassedOver | None:
    """Why `chosen` cannot be installed on one of the platforms (a requirement no index serves), or None."""
    assert chosen.vllm is not None
    for platform in sorted(platforms):
        key = set_key(install.package, chosen.vllm, platform, install.accelerator, install.python or "",
                      chosen.omni)  # fmt: skip
        record = known.get(key)
        if record is not None and not fresh and not answers.changed(record, install):
            return record
        locked = book.get(install, chosen.vllm, platform, chosen.omni, fresh=fresh or record is not None)
        if locked.missing is not None:
            return PassedOver(
                package=install.package,
                vllm=chosen.vllm,
                platform=platform,
                requirement=locked.missing,
                answer=None,  # the resolver has just said that nothing satisfies it
                served=_served(book, install, locked.missing),
                why=str(locked.unresolvable),
            )
    return None


def _served(book: SetBook, install: Install, requirement: str) -> list[str]:
    """The releases of the required package the indexes list, nearest the one asked for (for people)."""
    name = re.split(r"[=<>!~;\[ ]", requirement, maxsplit=1)[0]
    sources = install_sources(book.place.catalog, install, None, None, book.settings)
    try:
        return index.nearest(index.releases(name, sources), requirement)
    except index.IndexUnavailable:
        return []
