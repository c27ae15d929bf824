"""What the catalog says about releases: known-bad pins, the deliberate deviations from the site's commands
(each with its reason and the releases it applies to), which vllm-omni release pairs with which vLLM, and
where a platform's CUDA torch comes from, by torch release."""

from __future__ import annotations

from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from factory.base.models import Strict
from factory.catalog.platform import Platform
from factory.catalog.sourced import Sourced


class TorchSource(Sourced):
    """Where an install's torch comes from on one platform, for the torch releases `torch` matches, with the
    evidence: the package index's aarch64 torch is a CPU build up to 2.10.0 and a CUDA 13 build from 2.11.0.
    The lock resolves a set against the install's indexes, reads the torch it pins, and takes the first entry
    that matches: an entry naming `indexes` resolves the set again with them (the pip_extra_index_url setting
    replaces them, as every index but the default); one naming none keeps the set the package index gave."""

    platform: Platform
    torch: str  # a PEP 440 specifier on the release the set pins: ">=2.11"
    indexes: list[str] = []  # besides the default index, in the order uv asks them; none: the default alone
    # The first vLLM release whose torch this entry covers (vLLM 0.20.0 pins torch==2.11.0), said to people
    # whose release gets no CUDA set from the package index.
    vllm_from: str | None = None
    why: str

    def matches(self, platform: str, torch: str) -> bool:
        release = torch.split("+", 1)[0]  # 2.13.0+cpu is the 2.13.0 release
        return platform == self.platform and SpecifierSet(self.torch).contains(release, prereleases=True)

    def describe(self) -> str:
        return f"{self.why} (source: {self.source})"


class KnownBadPin(Sourced):
    vllm: str
    reason: str


class DeviationRule(Strict):
    """A deliberate difference from the upstream site's commands, applied to every process it matches."""

    flag: str  # the flag the rule adds or changes
    reason: str
    program: Literal["vllm", "vllm-router"] = "vllm"  # the processes it applies to
    when_present: list[str] = []  # every one of these flags is in the command
    when_absent: list[str] = []  # none of these is
    when_nonzero: list[str] = []  # each of these flags is there with a value other than 0
    when_host_network: bool = False  # only processes of deployments on the host's network (multi-node, PD)
    # Appended (the flag and its value) unless the command already has `flag`; {bind_address} is the address
    # the process must listen on: its own node's for a PD pool (the router calls it), else $BIND_ADDRESS;
    # {workers_start_s} the start budget of the vLLM processes the router fronts.
    add: list[str] = []
    # The flag each of whose values (given once per value) becomes a value of `flag`, once: vllm-router
    # takes its backends as `--worker-urls A B`, where the site writes `--backend-url A --backend-url B`.
    gather: str | None = None
    # Split an entry holding a flag and its value (`--max-model-len auto`) into the two words it is.
    split_flag_and_value: bool = False
    # The flag's value -> its replacement ({context_length} is the model's), or null to drop the flag.
    replace_values: dict[str, str | None] = {}
    # A PEP 440 specifier: only for these vLLM versions. With no readable version (a `nightly` image, no
    # lock and no floor) an `add` rule still applies; a rule that changes the recipe's own flag does not.
    vllm: str | None = None
    sources: list[str] = []

    def applies_to(self, version: str | None) -> bool:
        if self.vllm is None:
            return True
        if version is None:
            return not self.replace_values
        return SpecifierSet(self.vllm).contains(version, prereleases=True)


class OmniRelease(Sourced):
    """One vllm-omni release and the vLLM series (major.minor) it runs with, read from its project."""

    omni: str
    vllm: str  # "0.30": any 0.30.x


class OmniRefusal(Sourced):
    """Where no omni image can exist (an accelerator, a platform, or both), and why."""

    accelerator: str | None = None
    platform: str | None = None
    from_omni: str | None = None  # the first vllm-omni release it holds for (fa3-fwd: from 0.14.0); None: all
    why: str

    def matches(self, accelerator: str, platform: str | None, omni: str | None = None) -> bool:
        same_platform = self.platform is None or (platform is not None and self.platform == platform)
        same_release = self.from_omni is None or omni is None or Version(omni) >= Version(self.from_omni)
        return (
            (self.accelerator is None or self.accelerator == accelerator) and same_platform and same_release
        )


class OmniCatalog(Sourced):
    """vllm-omni: its releases with the vLLM each runs with, and where no omni image can exist."""

    package: str = "vllm-omni"
    releases: list[OmniRelease] = []
    refusals: list[OmniRefusal] = []

    def release_for(self, vllm: str) -> OmniRelease | None:
        """The vllm-omni release that runs with this vLLM release (the same major.minor), if any."""
        series = ".".join(vllm.split(".")[:2])
        return next((r for r in self.releases if r.vllm == series), None)

    def refusal(self, accelerator: str, platform: str | None, omni: str | None = None) -> str | None:
        """Why no omni image can exist for this accelerator (on this platform, with this vllm-omni release,
        when given); else None."""
        found = next((r for r in self.refusals if r.matches(accelerator, platform, omni)), None)
        return f"{found.why} (source: {found.source})" if found else None
