"""Validation reports: JSON for tools, JUnit XML for CI, and the record `factory publish` trusts."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from factory.base.files import write_text_atomic


@dataclass(frozen=True)
class Case:
    name: str
    status: str  # passed, failed, skipped
    detail: str
    seconds: float = 0.0


@dataclass
class ValidationReport:
    image: str
    image_id: str
    hardware: str
    vllm_version: str
    inputs_hash: str
    cases: list[Case] = field(default_factory=list)
    gpu_probes_run: bool = False
    # The container the live probes ran: which shipped file, and what validation changed in it (and why).
    started: str = ""
    # Where the checks ran under emulation: "linux/arm64 on a linux/amd64 engine (QEMU)"; "" natively.
    emulated: str = ""

    @property
    def passed(self) -> bool:
        return all(case.status != "failed" for case in self.cases) and any(
            c.status == "passed" for c in self.cases
        )

    @property
    def fully_validated(self) -> bool:
        """Static checks and the live probes all passed: what publishing requires."""
        return self.passed and self.gpu_probes_run

    def verdict(self, allow_no_gpu: bool) -> tuple[bool, str]:
        """Whether the run counts as a pass, and the one line that says so (or why not)."""
        if not self.passed:
            failed = [case for case in self.cases if case.status == "failed"]
            lines = [f"{self.image} failed validation:", *(f"  {c.name}: {c.detail}" for c in failed)]
            return False, "\n".join(lines)
        if self.fully_validated:
            return True, f"validated {self.image} ({self.image_id[:19]})"
        if allow_no_gpu:
            return True, f"{self.image}: built; static checks passed; GPU probes not run"
        return False, f"{self.image}: GPU probes not run, so it is not validated"

    def add(self, name: str, ok: bool, detail: str, seconds: float = 0.0) -> None:
        self.cases.append(Case(name, "passed" if ok else "failed", detail, round(seconds, 2)))

    def skip(self, name: str, why: str) -> None:
        self.cases.append(Case(name, "skipped", why))


HEALTH_MARGIN_S = 120  # beyond the health check's start period, before validation gives up


def write_reports(report: ValidationReport, reports: Path, stem: str) -> None:
    """The JSON and JUnit reports, and, when it passed, the record `factory publish` trusts."""
    write_json(report, reports / f"{stem}.json")
    write_junit(report, reports / f"{stem}.xml")
    if report.passed:
        write_record(report, reports / "validated")


def write_json(report: ValidationReport, path: Path) -> None:
    data = asdict(report) | {"passed": report.passed, "fully_validated": report.fully_validated}
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def read_json(path: Path) -> ValidationReport:
    """A report as write_json wrote it (the derived `passed` and `fully_validated` are recomputed)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data.pop("passed", None)
    data.pop("fully_validated", None)
    data["cases"] = [Case(**case) for case in data["cases"]]
    return ValidationReport(**data)


def write_junit(report: ValidationReport, path: Path) -> None:
    suite = ET.Element(
        "testsuite",
        name=f"validate {report.image}",
        tests=str(len(report.cases)),
        failures=str(sum(case.status == "failed" for case in report.cases)),
        skipped=str(sum(case.status == "skipped" for case in report.cases)),
    )
    if report.started:
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="started", value=report.started)
    for case in report.cases:
        element = ET.SubElement(
            suite, "testcase", classname=report.image, name=case.name, time=str(case.seconds)
        )
        if case.status == "failed":
            ET.SubElement(element, "failure", message=case.detail[:200]).text = case.detail
        elif case.status == "skipped":
            ET.SubElement(element, "skipped", message=case.detail)
    write_text_atomic(path, ET.tostring(suite, encoding="unicode") + "\n")


def record_path(records: Path, image_id: str) -> Path:
    return records / f"{image_id.replace(':', '-')}.json"


def write_record(report: ValidationReport, records: Path) -> Path:
    """Validation is recorded against the image ID: a rebuilt image is a new ID with no record."""
    path = record_path(records, report.image_id)
    write_json(report, path)
    return path
