"""What a KV-store file (kv_store/*.yaml) must hold beyond its types, checked when the tree is read, so that a
bad store stops the run in one line naming the file and the field, before any index is asked or any file
written: its shell text splits into words (the master's and the store service's commands, each install
line), its sizes are sizes Mooncake can register, and its config values are what the image's config filler
reads as they were written.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path

from factory.base.errors import InputError
from factory.base.placeholders import PLACEHOLDER, known_setting
from factory.recipes.tree_schema import ConfigValue, KvStore

# The memory a Mooncake client registers, as mooncake_config.py (0.3.13.post1) reads its config: a size in
# bytes, or a number with a binary suffix (case-insensitive, "256MB" is 256 MiB); its defaults where absent.
HELD = {"global_segment_size": 3355443200, "local_buffer_size": 1073741824}
SIZE_SUFFIXES = {"kb": 2**10, "mb": 2**20, "gb": 2**30, "tb": 2**40}  # the longer suffixes first
SIZE_SUFFIXES |= {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "b": 1}
# Above any node's memory (a pod asks for what its store registers): a bigger size is a typo or a probe.
MAX_SIZE = 2**50
SIZE_RULE = "a number of bytes, or one with a suffix (500GB, 64MB), from 0 to 1 PiB"


def size_bytes(value: ConfigValue) -> int:
    """A size in a Mooncake config, in bytes, as Mooncake reads it; ValueError saying why it is none (not a
    number, not finite, negative, or over MAX_SIZE)."""
    if isinstance(value, bool):
        raise ValueError("true or false is no size")
    text = str(value).strip().lower()
    number, multiplier = text, 1
    for suffix, times in SIZE_SUFFIXES.items():
        if text.endswith(suffix):
            number, multiplier = text[: -len(suffix)].strip(), times
            break
    try:
        amount = float(number) * multiplier
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(amount):
        raise ValueError("not a finite number")
    if amount > MAX_SIZE:
        raise ValueError("more than 1 PiB, more than any node's memory")
    if amount < 0:
        raise ValueError("a negative size")
    return int(amount)


def master_words(text: str) -> list[str]:
    """The master's command as the kv_store file writes it, a shell snippet with comment lines and
    backslash-continued lines, as the words it runs (ValueError when a quote is left open)."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return shlex.split(" ".join(lines).replace("\\ ", " "))


def shell_words(text: str) -> list[str]:
    """A command or an install line as the shell splits it into words (ValueError: a quote left open)."""
    return shlex.split(text)


def check_kv_store(store: KvStore, path: Path) -> None:
    """Refuses, naming the field, what planning or the image would fail on later."""
    _check_shell(store, path)
    _check_sizes(store, path)
    for field, config in _configs(store):
        for key, value in config.items():
            for text in (key, value) if isinstance(value, str) else (key,):
                _check_fillable(text, path, f"{field}.{key}")


def _check_shell(store: KvStore, path: Path) -> None:
    texts = [("mooncake_master.command", store.mooncake_master.command, master_words)]
    if store.mooncake_store_config is not None:
        texts.append(("mooncake_store_config.command", store.mooncake_store_config.command, shell_words))
    install = store.vllm.install
    lines = install.items() if isinstance(install, dict) else [("", install)] if install else []
    texts += [
        (f"vllm.install.{brand}" if brand else "vllm.install", line, shell_words) for brand, line in lines
    ]
    for field, text, split in texts:
        try:
            split(text)
        except ValueError as exc:
            raise InputError(
                f"shell text that does not split into words ({exc}: an unclosed quote?)",
                file=path,
                field=field,
                value=text,
                hint="close the quote, or escape it with a backslash",
            ) from None


def _configs(store: KvStore) -> Iterator[tuple[str, Mapping[str, ConfigValue]]]:
    yield "mooncake_vllm_config.template", store.mooncake_vllm_config.template
    if store.mooncake_store_config is not None:
        yield "mooncake_store_config.config", store.mooncake_store_config.config


def _check_sizes(store: KvStore, path: Path) -> None:
    """Every size readable, and the pool not empty: its owner (the store service in the centralized
    topology, else each instance) registers a segment of more than 0 bytes (an instance of the centralized
    topology gives 0 on purpose)."""
    owner = "mooncake_store_config.config" if store.mooncake_store_config else "mooncake_vllm_config.template"
    for field, config in _configs(store):
        for key in HELD:
            if key not in config:
                continue
            where = f"{field}.{key}"
            try:
                size = size_bytes(config[key])
            except ValueError as exc:
                raise InputError(f"not a size Mooncake can register: {exc}", file=path, field=where,
                                 value=config[key], valid=[SIZE_RULE]) from None  # fmt: skip
            if size == 0 and field == owner and key == "global_segment_size":
                raise InputError(
                    "the KV store's pool would hold nothing: this segment is the pool (more than 0 bytes)",
                    file=path,
                    field=where,
                    value=config[key],
                )


def _check_fillable(text: str, path: Path, field: str) -> None:
    """A `$` in a Mooncake config starts a setting the factory gives the process ($MOONCAKE_MASTER_IP): the
    image's config filler (factory-fill-config) replaces each when the process starts, and reads any other
    `$` as a setting too (`$(x)` stopped it: the store never started). So any other `$` is refused here."""
    at = text.find("$")
    while at != -1:
        match = PLACEHOLDER.match(text, at)
        if match is None or known_setting(match["braced"] or match["bare"]) is None:
            raise InputError(
                "a `$` in a Mooncake config must start a setting the factory knows: the config is filled "
                "from them when the process starts, and any other `$` stops the filler",
                file=path,
                field=field,
                value=text,
                valid=["$MOONCAKE_MASTER_IP", "$MOONCAKE_STORE_IP", "$MOONCAKE_DEVICE_NAME",
                       "$MOONCAKE_STORE_DEVICE_NAME", "${NAME} of these"],
            )  # fmt: skip
        at = text.find("$", match.end())
