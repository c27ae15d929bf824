"""Which vLLM and vllm-omni an omni recipe's install gets. vllm-omni's wheel declares no `vllm` requirement,
so the pairing is the catalog's `omni` table (read from vllm-omni's project), not the resolver's: the vLLM is
the newest release the recipe accepts whose series (major.minor) a vllm-omni release runs with."""

from __future__ import annotations

from packaging.version import Version

from factory.catalog.schema import Catalog, Install
from factory.lock.choose import Ask, choose
from factory.lockfile.model import OMNI, Release


def omni_refusal(
    catalog: Catalog, install: Install, platform: str | None = None, omni: str | None = None
) -> str | None:
    """Why no vllm-omni image can exist for this install (on this platform, with this vllm-omni release),
    with the evidence; else None."""
    if catalog.omni is None:
        return "the catalog has no `omni` table: which vLLM a vllm-omni release runs with is not known"
    refused = catalog.omni.refusal(install.accelerator, platform, omni)
    if refused is None and install.kind != "pip":  # a vendor image ships what its vendor put in it
        refused = f"a {install.kind} install ships vLLM alone: vllm-omni is installed with pip"
    return refused


def choose_omni(
    catalog: Catalog, request: Ask, install: Install, available: list[Version], known_bad: list[str]
) -> Release:
    """The vLLM release and the vllm-omni release installed with it, or why there is none."""
    refused = omni_refusal(catalog, install)
    if refused is not None:
        return Release(vllm=None, why=refused, constraint=request.constraint, cause=OMNI)
    assert catalog.omni is not None
    paired = [v for v in available if catalog.omni.release_for(str(v)) is not None]
    chosen = choose(request, install, paired, known_bad, {})
    if chosen.vllm is None:
        series = ", ".join(f"{r.omni} (vLLM {r.vllm}.x)" for r in catalog.omni.releases)
        why = f"{chosen.why}, among those a vllm-omni release runs with: {series}"
        return chosen.model_copy(update={"why": why, "cause": OMNI})
    omni = catalog.omni.release_for(chosen.vllm)
    assert omni is not None
    why = f"{chosen.why}; vllm-omni {omni.omni} runs with vLLM {omni.vllm}.x ({omni.source})"
    return chosen.model_copy(update={"omni": omni.omni, "why": why})
