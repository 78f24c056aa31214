"""The html placement page (``onyxrt explain --format html``): its layout in Python, and
the page itself opened in headless Chromium (screenshot saved as a test artifact, DOM
after the script ran)."""

from __future__ import annotations

import html
import os
import shutil
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import onnx
import pytest
from onnx import helper

import onyxrt as ort
from onyxrt.discovery import catalog
from onyxrt.placement_html import MIN_CHAIN, layout_graph, provider_colours, render_html
from onyxrt.testing import models

SIMNPU = "SimNPUExecutionProvider"
CPU = "CPUExecutionProvider"
REPO = Path(__file__).resolve().parents[1]
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage")

needs_simnpu = pytest.mark.skipif(
    SIMNPU not in catalog().available(), reason="onyxrt-simnpu is not installed or not usable"
)


def small_resnet() -> onnx.ModelProto:
    return models.resnet(depth_blocks=(1, 1), width=8, num_classes=10, image=32, batch=1)


def resnet_with_cpu_island() -> onnx.ModelProto:
    """The small ResNet with an Abs (not in the NPU's op set) after the first block: on
    SimNPU+CPU it runs NPU → CPU → NPU, with copies both ways."""
    model = small_resnet()
    nodes = model.graph.node
    at = next(i for i, n in enumerate(nodes) if n.name == "layer1.0.relu3")
    value = nodes[at].output[0]
    for node in nodes:
        for k, name in enumerate(node.input):
            if name == value:
                node.input[k] = f"{value}.abs"
    nodes.insert(at + 1, helper.make_node("Abs", [value], [f"{value}.abs"], name="abs"))
    return model


def session(model: onnx.ModelProto, providers: list[str]) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=providers)


def page_of(sess: ort.InferenceSession) -> str:
    # The CLI passes the session's graph the same way (see cli.cmd_explain).
    return render_html(sess.placement, sess._graph, "test page")


class _Elements(HTMLParser):
    """Collects the attributes of every element of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    handle_startendtag = handle_starttag


def elements(page: str) -> list[tuple[str, dict[str, str]]]:
    parser = _Elements()
    parser.feed(page)
    return parser.elements


def data_nodes(page: str) -> list[str]:
    return [a["data-node"] for _, a in elements(page) if "data-node" in a]


# --------------------------------------------------------------------------- layout


def test_layout_edges_go_down_and_boxes_do_not_overlap() -> None:
    sess = session(models.resnet(depth_blocks=(2, 1), width=8, image=32, batch=1), [CPU])
    layout = layout_graph(sess.placement, sess._graph)
    boxes = {b.key: b for b in layout.boxes}
    for edge in layout.edges:
        assert boxes[edge.dst].layer > boxes[edge.src].layer, edge
        ys = [y for _, y in edge.points]
        assert ys == sorted(ys), edge  # drawn top to bottom, through lanes
    by_layer: dict[int, list] = {}
    for b in layout.boxes:
        by_layer.setdefault(b.layer, []).append(b)
    for row in by_layer.values():
        row.sort(key=lambda b: b.x)
        for left, right in zip(row, row[1:]):
            assert left.x + left.w < right.x, (left.key, right.key)
    assert all(b.x >= 0 and b.x + b.w <= layout.width for b in layout.boxes)
    assert all(b.y >= 0 and b.y + b.h <= layout.height for b in layout.boxes)


@pytest.mark.parametrize("providers", [[CPU], pytest.param([SIMNPU, CPU], marks=needs_simnpu)])
def test_every_node_is_in_exactly_one_box_and_chains_are_runs(providers: list[str]) -> None:
    sess = session(resnet_with_cpu_island(), providers)
    layout = layout_graph(sess.placement, sess._graph)
    members = Counter(m.node for b in layout.boxes for m in b.members)
    assert set(members) == {n.node for n in sess.placement.nodes}
    assert set(members.values()) == {1}
    producer = {out: n.name for n in sess._graph.nodes for out in n.outputs}
    chains = [b for b in layout.boxes if b.kind == "chain"]
    assert chains
    for chain in chains:
        assert len(chain.members) >= MIN_CHAIN
        assert len({(m.provider, m.group) for m in chain.members}) == 1
        for before, after in zip(chain.members, chain.members[1:]):
            node = next(n for n in sess._graph.nodes if n.name == after.node)
            assert before.node in {producer.get(v) for v in node.inputs}
        assert chain.label.startswith(f"{len(chain.members)} nodes: {chain.members[0].op_type} → ")


def test_a_long_chain_is_one_box() -> None:
    sess = session(models.add_chain(300), [CPU])
    layout = layout_graph(sess.placement, sess._graph)
    assert [b.kind for b in layout.boxes] == ["input", "chain", "output"]
    assert len(layout.boxes[1].members) == 300
    page = page_of(sess)
    assert sorted(data_nodes(page)) == sorted(n.node for n in sess.placement.nodes)
    assert "300 nodes: Add → Add → " in page


@needs_simnpu
def test_copies_are_marked_on_their_edges_with_bytes() -> None:
    sess = session(resnet_with_cpu_island(), [SIMNPU, CPU])
    report = sess.placement
    layout = layout_graph(report, sess._graph)
    marked = [c for e in layout.edges for c in e.copies]
    assert {c.value for c in marked} == {c.value for c in report.copies_per_run}
    for edge in layout.edges:
        for c in edge.copies:
            assert c.value in edge.values
    page = page_of(sess)
    assert page.count('class="edge copy"') == sum(1 for e in layout.edges if e.copies)
    assert "⇄ 8.0 KiB" in page and "⇄ 12.0 KiB" in page  # 8192 and 12288 bytes


@needs_simnpu
def test_node_tooltips_name_op_provider_and_refusals() -> None:
    sess = session(resnet_with_cpu_island(), [SIMNPU, CPU])
    page = page_of(sess)
    refusal = next(r for r in sess.placement.refusals if r.node == "abs")
    assert (
        '<g class="node refused" data-node="abs" data-provider="CPUExecutionProvider">'
        f"<title>abs\nop: Abs\nprovider: CPUExecutionProvider\nrefused by {SIMNPU} "
        f"[{refusal.category}]: {refusal.reason}</title>"
    ) in page
    colours = provider_colours(sess.placement)
    assert colours[CPU] != colours[SIMNPU]
    assert f'fill="{colours[CPU]}"' in page and f'fill="{colours[SIMNPU]}"' in page
    assert page.count('class="group"') == len(sess.placement.groups)


class _Outline(HTMLParser):
    """Where the elements with an id start (offsets into the page), and which
    ``<details>`` are open."""

    def __init__(self, page: str) -> None:
        super().__init__()
        lines = page.splitlines(keepends=True)
        self._line_start = [0]
        for line in lines:
            self._line_start.append(self._line_start[-1] + len(line))
        self.starts: dict[str, int] = {}
        self.details: list[tuple[str, bool]] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        line, column = self.getpos()
        if a.get("id"):
            self.starts.setdefault(str(a["id"]), self._line_start[line - 1] + column)
        if tag == "details":
            self.details.append((str(a.get("id")), "open" in a))


@needs_simnpu
def test_summary_and_picture_come_before_the_detailed_lists() -> None:
    sess = session(resnet_with_cpu_island(), [SIMNPU, CPU])
    report = sess.placement
    page = page_of(sess)
    outline = _Outline(page)
    starts = outline.starts
    sections = ["details-report", "details-partitions", "details-nodes", "details-groups",
                "details-copies", "details-refusals", "details-fallbacks"]
    assert [d for d, _ in outline.details] == sections
    assert not [d for d, is_open in outline.details if is_open], "details start collapsed"
    first_detail = min(starts[d] for d in sections)
    assert starts["placement-summary"] < starts["placement-graph"] < first_detail

    # The summary is short: counts, not lists.
    start = page.index('<div id="placement-summary">')
    summary = page[start:page.index("\n", start)]
    counts = Counter(n.provider for n in report.nodes)
    assert f"{SIMNPU}</span>{counts[SIMNPU]} nodes" in summary
    assert f"{CPU}</span>1 node<" in summary
    assert (f"{len(report.nodes)} nodes &middot; {report.partitions} partitions &middot; "
            f"{len(report.copies_per_run)} copies per run (28.0 KiB) &middot; "
            "1 refusal (op: 1)") in summary
    assert "fused group" not in summary and "abs" not in summary
    # The full text report (every fused group, copy and refusal) is below the picture.
    above, below = page[:starts["placement-graph"]], page[first_detail:]
    for line in report.summary_lines():
        assert html.escape(line) not in above and html.escape(line) in below, line


def test_page_is_self_contained() -> None:
    page = page_of(session(small_resnet(), [CPU]))
    assert page.startswith("<!DOCTYPE html>")
    assert "http://" not in page and "https://" not in page
    tags = elements(page)
    assert not [a for t, a in tags if t in ("script", "img", "link", "iframe") and
                ("src" in a or "href" in a)]
    assert [t for t, _ in tags].count("script") == 1


# --------------------------------------------------------------------------- chromium


def chromium() -> str:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("Chromium not installed: `apt-get install chromium` (CI installs it in .ci/run)")


def artifacts_dir() -> Path:
    folder = Path(os.environ.get("ONYXRT_TEST_ARTIFACTS") or REPO / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, f"chromium {args} failed:\n{proc.stderr[-2000:]}"
    return proc


CASES = {
    "resnet-cpu": (small_resnet, [CPU]),
    "resnet-simnpu-cpu": (resnet_with_cpu_island, [SIMNPU, CPU]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_page_in_headless_chromium(case: str, tmp_path: Path) -> None:
    build, providers = CASES[case]
    if SIMNPU in providers and SIMNPU not in catalog().available():
        pytest.skip("onyxrt-simnpu is not installed or not usable")
    binary = chromium()
    model_path = tmp_path / f"{case}.onnx"
    onnx.save(build(), str(model_path))
    page_path = tmp_path / f"{case}.html"
    proc = subprocess.run(
        [sys.executable, "-m", "onyxrt", "explain", str(model_path), "--providers",
         ",".join(providers), "--format", "html", "--output", str(page_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    sess = ort.InferenceSession(str(model_path), providers=providers)
    expected_nodes = {n.node for n in sess.placement.nodes}
    url = page_path.resolve().as_uri()

    # (a) A screenshot, kept for people to look at.
    shot = artifacts_dir() / f"placement-{case}.png"
    shot.unlink(missing_ok=True)
    # The summary and the graph (75vh) fill the window; the partition bar and the flow, also
    # in provider colours, sit collapsed below it, out of the picture.
    run_chromium(binary, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,1200",
                 "--hide-scrollbars", url)
    assert shot.is_file(), f"Chromium wrote no screenshot at {shot}"
    assert shot.stat().st_size > 20_000, "the screenshot is nearly empty"
    from PIL import Image

    with Image.open(shot) as image:
        assert image.size == (1280, 1200)
        pixels = {rgb: count for count, rgb in image.convert("RGB").getcolors(1 << 24)}
    box_area = 150 * 40  # most of one node box: more than a legend chip's worth
    for provider in set(n.provider for n in sess.placement.nodes):
        colour = provider_colours(sess.placement)[provider]
        rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        assert pixels.get(rgb, 0) > box_area, f"no {provider} boxes ({colour}) in {shot}"

    # (b) The DOM after the script ran: every node is there, the script finished.
    dom = run_chromium(binary, tmp_path / "profile", "--dump-dom", url).stdout
    tags = elements(dom)
    svg = next(a for t, a in tags if t == "svg" and a.get("id") == "placement-graph")
    assert svg.get("data-ready") == "1", "the page's script did not run to the end"
    # The script set the view (HTMLParser lower-cases attribute names).
    assert svg["viewbox"] != f"0 0 {svg['data-width']} {svg['data-height']}"
    names = data_nodes(dom)
    assert len(set(names)) == len(sess.placement.nodes)
    assert set(names) == expected_nodes

    # "#expand" opens every collapsed chain at load (what a click on each does).
    chains = [a for t, a in tags if t == "g" and "chain" in a.get("class", "").split()]
    assert chains and not [a for a in chains if "open" in a["class"].split()]
    opened = elements(run_chromium(binary, tmp_path / "profile", "--dump-dom", url + "#expand").stdout)
    chains = [a for t, a in opened if t == "g" and "chain" in a.get("class", "").split()]
    assert chains and all("open" in a["class"].split() for a in chains)
