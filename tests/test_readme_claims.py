"""README claims that no other test touched: bad shared input stops the run, a 5xx health answer fails at
once, the JUnit report's content, `--tag` templates, and the bearer-token login of hosted registries; and
the pages themselves: each figure stated once, in docs/figures.md. The HTTP servers here are real (on
loopback) and stand in for what cannot exist on this machine: a vLLM server that answers 500, and ghcr.io's
token service."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from factory.base.errors import InputError
from factory.project import Project
from factory.publish.publisher import expand_tags
from factory.publish.registry import Credentials, manifest_digest
from factory.validate.probes import ContainerState, ProbeFailure, wait_healthy
from factory.validate.report import ValidationReport, write_junit
from tests.conftest import KIMI, ROOT, blueprint_of, run_factory, tree_snapshot

Handler = Callable[[BaseHTTPRequestHandler], None]


@pytest.fixture
def http_server() -> Iterator[Callable[[Handler], str]]:
    """Serves GET and HEAD with a handler on 127.0.0.1; yields a function that starts it, returning its
    address. Stopped when the test ends."""
    servers: list[ThreadingHTTPServer] = []

    def start(handle: Handler) -> str:
        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                handle(self)

            do_HEAD = do_GET

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _answer(request: BaseHTTPRequestHandler, status: int, body: bytes = b"", **headers: str) -> None:
    request.send_response(status)
    for name, value in headers.items():
        request.send_header(name.replace("_", "-"), value)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    if request.command != "HEAD":
        request.wfile.write(body)


# ---- bad shared input stops the whole run before anything is written ----


def _stops_everything(root: Path, *expected: str) -> None:
    before = tree_snapshot(root)
    result = run_factory(root, "generate")
    assert result.returncode == 2, result.stdout + result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr
    assert tree_snapshot(root) == before, "nothing was written"


def test_a_bad_taxonomy_stops_the_run_naming_file_and_field(scratch: Path) -> None:
    path = scratch / "recipes" / "taxonomy.yaml"
    path.write_text(path.read_text().replace("    gpu_count: 8\n", "    gpu_count: eight\n", 1))
    _stops_everything(scratch, "taxonomy.yaml", "gpu_count", "'eight'")


def test_a_bad_strategy_file_stops_the_run_naming_file_and_field(scratch: Path) -> None:
    path = scratch / "recipes" / "strategies" / "single_node_tp.yaml"
    path.write_text(path.read_text().replace("  min_gpus: 1\n", "  min_gpus: one\n", 1))
    _stops_everything(scratch, "single_node_tp.yaml", "min_gpus", "'one'")


# ---- live probes: a 5xx health answer fails at once ----


def test_a_5xx_health_answer_fails_at_once_with_the_logs(http_server: Callable[[Handler], str]) -> None:
    address = http_server(lambda request: _answer(request, 500, b"engine dead"))
    state = ContainerState(running=True, exit_code=None, logs_tail="EngineCore died: CUDA error")
    started = time.monotonic()
    with pytest.raises(ProbeFailure) as failure:
        wait_healthy(f"http://{address}/health", "c1", timeout_s=10, state=lambda: state)
    assert time.monotonic() - started < 5, "fails at once, not at the 10 s deadline"
    assert "answered 500" in str(failure.value) and "EngineCore died" in str(failure.value)


# ---- the JUnit report ----


def test_the_junit_report_has_one_case_per_check_with_failures_and_skips(tmp_path: Path) -> None:
    report = ValidationReport("vllm-factory/x:t", "sha256:ab", "h200", "0.11.2", "h")
    report.add("static: vllm version", True, "0.11.2", 1.5)
    report.add("static: serve args", False, "rejected --max-model-len auto")
    report.skip("live: chat", "no NVIDIA GPU on this engine")
    write_junit(report, tmp_path / "r.xml")
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert (suite.tag, suite.get("tests"), suite.get("failures"), suite.get("skipped")) == (
        "testsuite",
        "3",
        "1",
        "1",
    )
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert list(cases) == ["static: vllm version", "static: serve args", "live: chat"]
    assert cases["static: vllm version"].get("time") == "1.5" and len(cases["static: vllm version"]) == 0
    failure = cases["static: serve args"].find("failure")
    assert failure is not None and failure.text == "rejected --max-model-len auto"
    skipped = cases["live: chat"].find("skipped")
    assert skipped is not None and skipped.get("message") == "no NVIDIA GPU on this engine"


# ---- publishing: tag templates, and the token login ghcr.io and Docker Hub use ----


def test_tag_templates_expand_to_the_readmes_tags_and_a_bad_one_names_the_choices(
    project: Project,
) -> None:
    image = blueprint_of(project, KIMI, "h200").image
    templates = ["{tag}-1.2.0", "{tag}-sha-abc1234", "latest-{hardware}-{variant}"]
    assert expand_tags(image, templates) == [
        f"{image.tag}-1.2.0",
        f"{image.tag}-sha-abc1234",
        "latest-h200-default",
    ]
    with pytest.raises(InputError) as bad:
        expand_tags(image, ["{tga}-1"])
    assert "--tag" in str(bad.value) and "{tag}" in str(bad.value) and "tga" in str(bad.value)


def test_a_registry_that_asks_for_a_bearer_token_gets_one_from_its_token_service(
    http_server: Callable[[Handler], str],
) -> None:
    """ghcr.io's exchange: 401 with `WWW-Authenticate: Bearer realm=...`, basic auth at the realm for a
    token, the request again with that token."""
    login = "Basic " + base64.b64encode(b"me:secret").decode()
    seen: list[str] = []
    address = ""

    def handle(request: BaseHTTPRequestHandler) -> None:
        auth = request.headers.get("Authorization", "")
        seen.append(f"{request.path.split('?')[0]} {auth.split(' ')[0]}")
        if request.path.startswith("/token"):
            if auth != login or "scope=repository%3Ateam%2Fx%3Apull" not in request.path:
                _answer(request, 401)
            else:
                _answer(request, 200, json.dumps({"token": "t0k"}).encode())
        elif auth == "Bearer t0k":
            _answer(request, 200, Docker_Content_Digest="sha256:" + "a" * 64)
        else:
            challenge = f'Bearer realm="http://{address}/token",service="reg",scope="repository:team/x:pull"'
            _answer(request, 401, WWW_Authenticate=challenge)

    address = http_server(handle)
    digest = manifest_digest(f"{address}/team", "x", "t1", Credentials("me", "secret"))
    assert digest == "sha256:" + "a" * 64
    assert seen == ["/v2/team/x/manifests/t1 Basic", "/token Basic", "/v2/team/x/manifests/t1 Bearer"]


# ---- the pages' figures: each has one home, docs/figures.md ----

FIGURES = ROOT / "docs" / "figures.md"
NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# a number and the unit after it: "1,905 images", "30.3 s", "1.15x", "6.72 %", "101 `vllm-omni`"
COUNT = re.compile(rf"(?<![\w.,/-])({NUMBER})(?![\d,]\d|\.\d)\s?`?([A-Za-z%][\w/+-]*)")
# Units of measure name no figure by themselves ("939 s" is no lock time); a noun such as "Dockerfiles" does.
MEASURES = {"s", "ms", "min", "GB", "MB", "KB", "GiB", "MiB", "KiB", "%", "x"}
WORDS = {"a", "and", "by", "for", "from", "in", "of", "on", "or", "the", "to", "vs", "with"}  # never units
NOT_VALUES = {"figure", "date", "goal", "made by"}  # the columns of a Figures table that hold no value


def other_pages() -> dict[str, str]:
    """The README and every page of docs/ but the Figures page, by path: where no figure may be stated."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in pages if p != FIGURES}


def _tables(section: str) -> list[list[dict[str, str]]]:
    """Each Markdown table of a page as rows keyed by the table's header."""
    tables = []
    for block in re.findall(r"(?:^\|.*\n)+", section, flags=re.M):
        lines = [[cell.strip() for cell in line.strip(" |").split(" | ")] for line in block.splitlines()]
        tables.append([dict(zip(lines[0], row, strict=True)) for row in lines[2:]])
    return tables


def _counts(text: str) -> list[tuple[str, str]]:
    """Each number of a text with its unit, as "1,905" and "image" (plural and singular alike)."""
    return [(value, unit.rstrip("s") or unit) for value, unit in COUNT.findall(text) if unit not in WORDS]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _spellings(value: str) -> set[str]:
    """How a value may be written again: as is, without its thousands commas, and rounded once
    (10.87 as 10.9, 46,378 as 46,000)."""
    spellings = {value, value.replace(",", "")}
    if "." in value and len(value.split(".")[1]) > 1:
        places = len(value.split(".")[1]) - 1
        spellings.add(f"{_number(value):.{places}f}")
    elif "." not in value and _number(value) >= 10_000:
        spellings.add(f"{round(_number(value), -3):,.0f}")
    return spellings


def _sentences(text: str) -> list[str]:
    """Sentences, with each table row one of its own."""
    parts = re.split(r"\n\s*\n|\n(?=\|)|(?<=\.)\s+(?=[A-Z`*(])", text)
    return [" ".join(part.split()) for part in parts]


def figure_problems(figures: str, pages: dict[str, str]) -> list[str]:
    """What makes a figure of the Figures page's tables have more than one home: its value written again on
    another page (within three words of its unit), or another value written with its unit outside a sentence
    that says what it was `before` a change (the one place history may hold an older value)."""
    problems: list[str] = []
    values: dict[str, set[str]] = {}  # unit -> every spelling of its figures' values
    headlines: set[str] = set()  # the unit of each row's first value, which names that figure
    for table in _tables(figures):
        names = [next(iter(row.values())) for row in table]
        problems += [f"Figures: {name!r} is a row twice" for name in set(names) if names.count(name) > 1]
        for row in table:
            name = next(iter(row.values()))
            if "date" in row and not re.search(r"\d{4}-\d{2}-\d{2}", row["date"]):
                problems.append(f"Figures: {name!r} says no date")
            if "made by" in row and not row["made by"]:
                problems.append(f"Figures: {name!r} says nothing of what makes it")
            cells = [cell for column, cell in row.items() if column not in NOT_VALUES and cell != name]
            counts = _counts(" ".join(cells))
            headlines.update(unit for _, unit in counts[:1] if unit not in MEASURES)
            for value, unit in counts:
                values.setdefault(unit, set()).update(_spellings(value))
    for page, text in pages.items():
        for sentence in _sentences(text):
            for value, unit in _counts(sentence):
                if value in values.get(unit, ()) and _number(value) >= 10:
                    problems.append(f"{page}: stated again outside Figures: {value} {unit}: {sentence[:160]}")
                elif unit in headlines and _number(value) >= 100 and "before" not in sentence.lower():
                    problems.append(f"{page}: another value for a figure ({value} {unit}): {sentence[:160]}")
            for key, spellings in values.items():
                for value in spellings if key not in MEASURES else ():
                    words = r"(?:\W+\w+){1,3}?\W+`?"  # "1,905 of its images"
                    near = rf"(?<![\w.,/-]){re.escape(value)}(?![\d,]\d|\.\d){words}{re.escape(key)}s?\b"
                    if _number(value) >= 100 and re.search(near, sentence):
                        problems.append(
                            f"{page}: stated again outside Figures: {value} ... {key}: {sentence[:160]}"
                        )
    return sorted(set(problems))


def test_each_figure_is_stated_once_in_the_figures_page() -> None:
    problems = figure_problems(FIGURES.read_text(), other_pages())
    assert problems == [], "\n".join(problems)


def test_a_figure_stated_again_or_with_another_value_is_found_and_history_is_not() -> None:
    """The check itself: a row's value planted in another page is found, in its own words, rounded, or
    changed; the same sentence about the value before a change is history and passes."""
    figures, pages = FIGURES.read_text(), other_pages()
    row = _tables(figures)[0][1]  # a count of the shared corpus, "1,905 images" or so
    value, unit = COUNT.findall(row["value"])[0]
    changed = f"{_number(value) + 20:,.0f}"

    def planted(sentence: str, page: str = "README.md") -> list[str]:
        text = pages[page].replace("\n## ", f"\n{sentence}\n\n## ", 1)
        assert sentence in text
        return figure_problems(figures, {**pages, page: text})

    assert planted(f"The corpus makes {value} {unit} today.")
    assert planted(f"The corpus makes {value} {unit} today.", "docs/kubernetes.md")[0].startswith(
        "docs/kubernetes.md: "
    )
    assert planted(f"The corpus makes {value.replace(',', '')} of its {unit} today.")
    assert planted(f"The corpus makes {changed} {unit} today.")
    assert not planted(f"The corpus made {changed} {unit} before this change.")
    assert not planted(f"The corpus makes its {unit} (see Figures).")
