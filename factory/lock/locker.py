"""`factory lock`: choose a vLLM release for every recipe, variant and install, and resolve the complete
hash-locked dependency set of every (release, platform, accelerator, Python) an image of them installs.

Existing choices are kept while what the recipe asks is unchanged; `--upgrade` (all, or one recipe) moves
them on purpose, `--refresh` tries again the releases passed over because they could not be installed, and
the lock file's diff shows what moved. The index is asked only here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from packaging.version import Version

from factory.base.reporter import Reporter, silent
from factory.base.settings import BuildSettings
from factory.catalog.schema import Install
from factory.lock import index
from factory.lock.choose import Ask, ask, choose, recipe_image, release_of
from factory.lock.installable import Answers, first_installable
from factory.lock.mooncake import lock_mooncake
from factory.lock.omni import choose_omni
from factory.lock.resolve import install_sources
from factory.lock.sets import LockPlace, SetBook, SetWishes, missing_of
from factory.lock.uv import uv_sets
from factory.lockfile.model import Lock, LockedSet, PassedOver, Release, set_key
from factory.lockfile.store import inputs_digest, write_lock
from factory.project import Project
from factory.recipes.loader import LoadedRecipe
from factory.synthesis.matrix import hardware_for


@dataclass
class LockReport:
    releases: int = 0
    kept: int = 0
    moved: list[str] = field(default_factory=list)  # "recipe variant install: old -> new"
    none: list[str] = field(default_factory=list)  # "recipe variant install: why"
    passed_over: list[str] = field(default_factory=list)  # "recipe variant install: why"
    sets_resolved: int = 0
    sets_kept: int = 0
    unresolvable: list[str] = field(default_factory=list)


def lock(
    project: Project,
    settings: BuildSettings,
    upgrade: str | None = None,
    report: Reporter = silent,
    refresh: bool = False,
) -> LockReport:
    """Write the project's lock (project.lock_path). `upgrade`: "*" for every recipe, else one recipe id.
    `refresh`: try again every release passed over whose missing requirement the indexes now answer
    otherwise (a recipe moves up to it once it installs)."""
    previous = project.lock or Lock(inputs="")
    inputs = inputs_digest(project.tree.root, project.catalog_path.parent)
    # Unchanged recipes and catalog: what found no release or set stays as it was (a lock run twice is
    # byte-identical, and quick); changed ones are chosen and resolved again.
    same_inputs = previous.inputs == inputs
    place = LockPlace(project.catalog, project.lock_path)
    book = SetBook(place, previous, settings, upgrade == "*", same_inputs, report)
    chooser = _Chooser(project, settings, previous, book, Answers(book), refresh)
    # A first pass that settles nothing learns which sets the choosing asks for; they are settled at once,
    # then the real pass finds them settled (and settles one by one what only it asks: a release passed over).
    wishes = SetWishes(book)
    rehearsal = _Chooser(project, settings, previous, wishes, Answers(wishes, chooser.answers.asked), refresh,
                         available=chooser.available)  # fmt: skip
    _lock_sets(project, _choose_all(project, rehearsal, upgrade), wishes)
    book.settle_all(wishes.wanted)
    releases = _choose_all(project, chooser, upgrade)
    sets, texts = _lock_sets(project, releases, book)
    result = chooser.result
    result.sets_resolved, result.sets_kept = book.counts.resolved, book.counts.kept
    result.unresolvable = sorted(book.counts.unresolvable)
    uv_locked, uv_texts = uv_sets(place, previous, settings, report)
    layers, layer_texts = lock_mooncake(
        project.catalog, project.tree.kv_stores, sets, texts, previous, project.lock_path, settings, report
    )
    new = Lock(inputs=inputs, uv=project.catalog.uv, releases=releases, sets={**sets, **uv_locked},
               passed_over=dict(sorted(chooser.passed.items())) or None, mooncake=layers or None)  # fmt: skip
    write_lock(project.lock_path, new, {**texts, **uv_texts, **layer_texts})
    return result


def _choose_all(
    project: Project, chooser: _Chooser, upgrade: str | None
) -> dict[str, dict[str, dict[str, Release]]]:
    """recipe -> variant -> install -> the release chosen for it."""
    releases: dict[str, dict[str, dict[str, Release]]] = {}
    for recipe_id, loaded in sorted(project.tree.recipes.items()):
        moving = upgrade == "*" or (upgrade is not None and project.tree.recipe(upgrade) is loaded)
        for variant, installs in _installs_needed(project, loaded).items():
            for install_name, brand in sorted(installs.items()):
                chosen = chooser.release(loaded, variant, install_name, brand, moving)
                releases.setdefault(recipe_id, {}).setdefault(variant, {})[install_name] = chosen
    return releases


@dataclass
class _Chooser:
    """Chooses the release of each install of each recipe's variant, with what one run has learnt: the
    releases each package has, the sets settled, the releases passed over."""

    project: Project
    settings: BuildSettings
    previous: Lock
    book: SetBook
    answers: Answers
    refresh: bool
    result: LockReport = field(default_factory=LockReport)
    passed: dict[str, PassedOver] = field(default_factory=dict)
    available: dict[str, list[Version]] = field(default_factory=dict)

    def release(
        self, loaded: LoadedRecipe, variant: str, install_name: str, brand: str, moving: bool
    ) -> Release:
        project, known = self.project, self.previous.passed_over or {}
        install = project.catalog.installs[install_name]
        request = ask(loaded, variant, project.catalog, brand)
        platforms = _platforms(project, loaded, variant, install_name)
        old = self.previous.releases.get(loaded.recipe_id, {}).get(variant, {}).get(install_name)
        where = f"{loaded.recipe_id} {variant} {install_name}"
        if old is not None and not moving and self._still(old, request, platforms, install):
            chosen = old
            self.passed.update({key: known[key] for key in old.passed_over or [] if key in known})
            self.result.kept += 1
        else:
            if install.kind == "pip" and request.refused is None and install.package not in self.available:
                self.book.report(f"asking the index for the releases of {install.package}")
                every = install_sources(project.catalog, install, None, None, self.settings)
                self.available[install.package] = index.releases(install.package, every)
            pick = _picker(project, loaded, variant, request, install, brand)
            listed = self.available.get(install.package, [])
            chosen, newly = first_installable(
                pick, listed, request, install, platforms, known, self.answers, fresh=moving
            )
            self.passed.update(newly)
            if old is not None and old.vllm != chosen.vllm:
                self.result.moved.append(f"{where}: {old.vllm} -> {chosen.vllm}")
        if chosen.passed_over:
            notes = "; ".join(self.passed[key].describe() for key in chosen.passed_over if key in self.passed)
            self.result.passed_over.append(f"{where}: {notes}")
        self.result.releases += 1
        if chosen.vllm is None:
            self.result.none.append(f"{where}: {chosen.why}")
        return chosen

    def _still(self, old: Release, request: Ask, platforms: set[str], install: Install) -> bool:
        """Whether a release chosen before stays: the recipe asks the same, a release found before is not
        one that cannot be installed (unless asked for exactly), and (on `--refresh`) no release passed over
        for it has become installable."""
        if old.constraint != request.constraint or not (old.vllm is not None or self.book.same_inputs):
            return False
        if old.vllm is not None and request.exact is None and install.kind == "pip":
            for platform in platforms:
                key = set_key(install.package, old.vllm, platform, install.accelerator, install.python or "",
                              old.omni)  # fmt: skip
                locked = self.previous.sets.get(key)
                if locked is not None and missing_of(locked) is not None:
                    return False  # chosen before releases were checked for what they require
        if self.refresh:
            records = [(self.previous.passed_over or {}).get(key) for key in old.passed_over or []]
            return not any(r is not None and self.answers.changed(r, install) for r in records)
        return True


def _picker(
    project: Project, loaded: LoadedRecipe, variant: str, request: Ask, install: Install, brand: str
) -> Callable[[list[Version]], Release]:
    """How a release is picked for one install among the releases still in the running (newest first)."""
    bad = [b.vllm for b in project.catalog.known_bad.get(loaded.model_id, [])]
    images = _vendor_images(install, loaded, variant, brand)

    def pick(listed: list[Version]) -> Release:
        if loaded.recipe.is_omni:
            return choose_omni(project.catalog, request, install, listed, bad)
        return choose(request, install, listed, bad, images)

    return pick


def _lock_sets(
    project: Project, releases: dict[str, dict[str, dict[str, Release]]], book: SetBook
) -> tuple[dict[str, LockedSet], dict[str, str]]:
    """Every locked set the chosen releases need (those settled while choosing are not resolved again)."""
    sets: dict[str, LockedSet] = {}
    texts: dict[str, str] = {}
    for recipe_id, variants in sorted(releases.items()):
        loaded = project.tree.recipes[recipe_id]
        for variant, installs in variants.items():
            for install_name, release in installs.items():
                install = project.catalog.installs[install_name]
                if install.kind != "pip" or release.vllm is None or install.python is None:
                    continue
                for platform in sorted(_platforms(project, loaded, variant, install_name)):
                    key = set_key(install.package, release.vllm, platform, install.accelerator,
                                  install.python, release.omni)  # fmt: skip
                    sets[key] = book.get(install, release.vllm, platform, release.omni)
                    text = book.text(key)
                    if text:
                        texts[f"{key}.txt"] = text
    return dict(sorted(sets.items())), texts


def _installs_needed(project: Project, loaded: LoadedRecipe) -> dict[str, dict[str, str]]:
    """variant -> install -> the brand of the hardware it serves, for every catalog hardware it renders on."""
    needed: dict[str, dict[str, str]] = {}
    only = project.catalog.only_hardware.get(loaded.recipe_id)
    for variant in loaded.recipe.variants:
        for hardware in hardware_for(loaded.recipe, variant, project.tree.taxonomy):
            if hardware not in project.catalog.hardware or (only is not None and hardware not in only):
                continue
            brand = project.tree.taxonomy.hardware_profiles[hardware].brand
            needed.setdefault(variant, {})[project.catalog.hardware[hardware].install] = brand
    return needed


def _vendor_images(install: Install, loaded: LoadedRecipe, variant: str, brand: str) -> dict[Version, str]:
    """The vendor images known for an install: the catalog's, and the one the recipe names for its brand."""
    if install.kind != "vendor-image":
        return {}
    images = {Version(published.vllm): published.image for published in install.images}
    named = recipe_image(loaded.recipe.variants[variant].docker_image, brand) or recipe_image(
        loaded.recipe.model.docker_image, brand
    )
    release = release_of(named)
    if named and release:
        images[release] = named
    return images


def _platforms(project: Project, loaded: LoadedRecipe, variant: str, install_name: str) -> set[str]:
    platforms: set[str] = set()
    for hardware in hardware_for(loaded.recipe, variant, project.tree.taxonomy):
        entry = project.catalog.hardware.get(hardware)
        if entry is not None and entry.install == install_name:
            platforms.add(entry.platform)
    return platforms
