"""A pytest plugin: the wall time of each CI part (.ci/parts.toml) that the tests make up, recorded for
`.ci/run` to print against its budget, and printed at the end of the run.

A test's time is its setup, call and teardown: a session fixture counts where it is first built, which is
the part that pays for it when that part runs alone.
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _times() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_times", ROOT / ".ci" / "times.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class PartTimes:
    def __init__(self) -> None:
        self.times = _times()
        self.seconds: dict[str, float] = defaultdict(float)
        self.modules: dict[str, float] = defaultdict(float)

    @pytest.hookimpl
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """The modules of `late` parts (they need tools built from Go) run after every other, keeping
        each side's order: on a cold run their tools build in the background meanwhile."""
        late = self.times.late_modules()
        items.sort(key=lambda item: Path(item.nodeid.split("::", 1)[0]).name in late)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = Path(report.nodeid.split("::", 1)[0]).name
        self.modules[module] += report.duration
        self.seconds[self.times.part_of_module(module)] += report.duration

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        terminalreporter.section("time by CI part (.ci/parts.toml)")
        for part, seconds in sorted(self.seconds.items(), key=lambda item: -item[1]):
            terminalreporter.write_line(f"{part:<32} {seconds:8.1f} s")
        terminalreporter.section("time by test module")
        for module, seconds in sorted(self.modules.items(), key=lambda item: -item[1])[:25]:
            terminalreporter.write_line(f"{module:<40} {seconds:8.1f} s")
        for part, seconds in self.seconds.items():  # for .ci/run's report ($FACTORY_CI_TIMES)
            self.times.append({"part": part, "seconds": round(seconds, 1)})
