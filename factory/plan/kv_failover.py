"""What a KV-store deployment needs to outlive one of its processes, added to the site's commands (each a
recorded deviation): the master's client lease on its command line, and the instances' load-failure policy
in their --kv-transfer-config.

Run here with the site's commands (vLLM 0.32.0, Mooncake 0.3.13.post1): instance A killed with SIGKILL, the
other instance answered 500 for a prompt whose blocks A held ("Failing 1 request(s) due to KV load failure
(failure_policy=fail)"), because vLLM's default policy fails a request when a block the store listed cannot be
read. Frozen instead (a stalled process), the other blocked 60 s on each handshake with it ("SocketHandShake-
Plugin: unexpected handshake message type") and answered 500 after 183 s, while the master, after the lease,
counted one client of two: the CI failure's signature. With `recompute` the request is computed instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from factory.plan.deployment import FlagEdit

LEASE_FLAG = "-client_ttl"
TRANSFER_FLAG = "--kv-transfer-config"
POLICY_KEY = "kv_load_failure_policy"

LEASE_REASON = (
    "the master's client lease is stated (seconds; the master's own default when the site gives none): "
    "a killed process's segment stays listed this long, and an instance that finds the first block of a "
    "prompt there retries until the master drops it (vLLM 0.32.0), so the lease is how long a dead "
    "process can slow the others"
)
POLICY_REASON = (
    "a request whose listed blocks cannot be read (their process killed or stalled) is computed instead of "
    "failed: with vLLM's default (fail) an instance answered 500 for every prompt that had a block in a "
    "killed instance's segment (run here)"
)


def with_lease(words: Sequence[str], ttl_s: int, path: str) -> tuple[list[str], FlagEdit | None]:
    """The master's words with its client lease, unless the site's command already states one."""
    if any(word == LEASE_FLAG or word.startswith(f"{LEASE_FLAG}=") for word in words):
        return list(words), None
    added = [f"{LEASE_FLAG}={ttl_s}"]
    return [*words, *added], FlagEdit(process=path, before=[], after=added)


def with_failure_policy(
    args: Sequence[str], policy: str, path: str
) -> tuple[tuple[str, ...], FlagEdit | None]:
    """An instance's flags with the policy in its (last) --kv-transfer-config, unless that names one; its
    other keys and their order as the site wrote them."""
    found = [index for index, word in enumerate(args[:-1]) if word == TRANSFER_FLAG]
    if not found:
        return tuple(args), None
    at = found[-1] + 1
    try:
        config = json.loads(args[at])
    except json.JSONDecodeError:
        return tuple(args), None  # not ours to rewrite: vLLM judges it as the site wrote it
    if not isinstance(config, dict) or POLICY_KEY in config:
        return tuple(args), None
    value = json.dumps({**config, POLICY_KEY: policy}, separators=(",", ":"))
    changed = [*args[:at], value, *args[at + 1 :]]
    edit = FlagEdit(process=path, before=[TRANSFER_FLAG, args[at]], after=[TRANSFER_FLAG, value])
    return tuple(changed), edit
