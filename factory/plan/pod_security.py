"""The strictest Kubernetes Pod Security Standard a process's pod can run under, from its run spec: what the
API server's Pod Security admission checks of a pod the factory prints (k8s.io/pod-security-admission,
policy/check_*.go): restricted takes a non-root user, RuntimeDefault or Localhost seccomp, no privilege
escalation, every capability dropped and none added but NET_BIND_SERVICE; baseline takes capabilities of
the container runtimes' default set and refuses an Unconfined seccomp or AppArmor profile; privileged takes
anything. The control plane's own admission agrees on every project deployment (tests)."""

from __future__ import annotations

from typing import Literal

from factory.plan.runspec import RunSpec

Level = Literal["restricted", "baseline", "privileged"]
LEVELS: tuple[Level, ...] = ("restricted", "baseline", "privileged")
# policy/check_capabilities_restricted.go and check_capabilities_baseline.go
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
UNCONFINED = ("seccomp=unconfined", "apparmor=unconfined")


def level(spec: RunSpec) -> tuple[Level, str]:
    """The strictest level that admits the process's pod, and why not a stricter one."""
    added = set(spec.capabilities)
    unconfined = [option for option in spec.security_opt if option in UNCONFINED]
    if unconfined or not added <= BASELINE_CAPABILITIES:
        what = unconfined or sorted(added - BASELINE_CAPABILITIES)
        return "privileged", f"baseline refuses {', '.join(what)}"
    if not added <= RESTRICTED_CAPABILITIES:
        return "baseline", f"restricted refuses the capabilities {', '.join(sorted(added))}"
    return "restricted", "non-root, RuntimeDefault seccomp, no escalation, every capability dropped"


def strictest(specs: list[RunSpec]) -> tuple[Level, str]:
    """The level a namespace holding every one of these pods can enforce: the least strict among them."""
    found = [level(spec) for spec in specs]
    return max(found, key=lambda pair: LEVELS.index(pair[0]))
