"""The documentation site: the guide's code runs, the API reference is complete, the nav
lists every page.

Convention for code blocks in docs/writing-a-provider.md (``GUIDE``):

* a fenced block with a title, ```` ```python title="onyxrt-tiny/onyxrt_tiny/plugin.py" ````
  (any language), is a file of the example package: it is written to that path;
* an untitled ```` ```python ```` block is a step the reader runs: the steps run in order,
  in one interpreter, after every file is written (so a step may use any earlier name);
* other untitled blocks (``bash``, ``text``, ``toml``) are shown, not run.

Material renders the title as the block's caption, so the reader sees the same path the
test writes. ``python tests/test_docs.py extract DEST`` writes the example package alone
(``nox -s template`` installs it with pip, as a reader would).

The API reference is checked in the *built* site when there is one: ``nox -s docs`` builds
it and runs this file with ``ONYXRT_DOCS_SITE`` pointing at it; elsewhere the site is
built here if MkDocs is installed, or that test is skipped (the source-level check of the
mkdocstrings directives still runs).
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDE = DOCS / "writing-a-provider.md"
API_PAGE = DOCS / "api.md"

_FENCE = re.compile(r"^```(?P<lang>[\w-]*)(?P<attrs>[^\n]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
_TITLE = re.compile(r'title="(?P<title>[^"]+)"')


@dataclass(frozen=True)
class CodeBlock:
    lang: str
    title: str | None
    body: str
    line: int


def code_blocks(markdown: str) -> list[CodeBlock]:
    """The top-level fenced code blocks of a markdown page, in order."""
    blocks = []
    for m in _FENCE.finditer(markdown):
        title = _TITLE.search(m["attrs"])
        line = markdown.count("\n", 0, m.start()) + 1
        blocks.append(CodeBlock(m["lang"], title["title"] if title else None, m["body"], line))
    return blocks


def extract_guide(dest: Path) -> list[CodeBlock]:
    """Write the guide's titled blocks under ``dest``; return its runnable python steps."""
    steps = []
    for block in code_blocks(GUIDE.read_text(encoding="utf-8")):
        if block.title:
            path = dest / block.title
            if path.exists():
                raise ValueError(f"{GUIDE.name}:{block.line}: {block.title} is written twice")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.body, encoding="utf-8")
        elif block.lang == "python":
            steps.append(block)
    return steps


def _fake_install(project: Path) -> None:
    """Make ``project`` look installed when it is on sys.path: a ``*.dist-info`` with the
    entry points its pyproject declares (what ``pip install`` would write)."""
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    info = project / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n"
    )
    lines = []
    for group, entries in meta.get("entry-points", {}).items():
        lines += [f"[{group}]"] + [f"{k} = {v}" for k, v in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def _run(args: list[str], cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ONYXRT_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


# -- the guide ---------------------------------------------------------------------------


def test_guide_builds_a_package_whose_steps_run(tmp_path: Path) -> None:
    steps = extract_guide(tmp_path)
    project = tmp_path / "onyxrt-tiny"
    assert (project / "pyproject.toml").is_file(), "the guide ends in a pip-installable package"
    assert len(steps) >= 3, "the guide's python steps were not found"
    _fake_install(project)
    # One script, with each step's position in the page, so a failure names the block.
    script = "\n".join(f"# --- {GUIDE.name}:{s.line}\n{s.body}" for s in steps)
    (tmp_path / "guide_steps.py").write_text(script, encoding="utf-8")
    result = _run([sys.executable, "guide_steps.py"], tmp_path, project)
    assert result.returncode == 0, (
        f"a step of {GUIDE.name} failed:\n{result.stdout}\n{result.stderr}"
    )
    assert "TinyExecutionProvider" in result.stdout  # the printed placement


def test_guide_package_passes_the_conformance_suite(tmp_path: Path) -> None:
    extract_guide(tmp_path)
    project = tmp_path / "onyxrt-tiny"
    _fake_install(project)
    result = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], project, project
    )
    assert result.returncode == 0, result.stdout + result.stderr
    passed = re.search(r"\b(\d+) passed\b", result.stdout)
    assert passed and int(passed[1]) >= 30, result.stdout  # the three providers' suites


# -- the API reference -------------------------------------------------------------------


def _public_api() -> list[str]:
    import onyxrt

    return [f"onyxrt.{name}" for name in onyxrt.__all__]


def _provider_methods() -> list[str]:
    from onyxrt.protocol import ExecutionProvider

    names = []
    for name, value in vars(ExecutionProvider).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (classmethod, staticmethod, property)) or inspect.isfunction(value):
            names.append(f"onyxrt.protocol.ExecutionProvider.{name}")
    return names


def test_api_page_has_a_directive_for_every_public_name() -> None:
    directives = set(re.findall(r"^::: ([\w.]+)\s*$", API_PAGE.read_text(), re.M))
    missing = [n for n in _public_api() if n not in directives]
    assert not missing, f"add '::: NAME' to docs/api.md for: {missing}"
    assert "onyxrt.protocol" in directives


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = os.environ.get("ONYXRT_DOCS_SITE")
    if site:
        return Path(site)
    pytest.importorskip(
        "mkdocs", reason="MkDocs is not installed here; `nox -s docs` runs this test"
    )
    pytest.importorskip(
        "mkdocstrings_handlers.python", reason="mkdocstrings[python] is not installed"
    )
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return out


def test_built_api_reference_documents_the_public_api(built_site: Path) -> None:
    html = (built_site / "api" / "index.html").read_text(encoding="utf-8")
    ids = set(re.findall(r'\bid="([^"]+)"', html))
    missing = [n for n in _public_api() + _provider_methods() if n not in ids]
    assert not missing, f"not in the built API reference (no docstring?): {missing}"


# -- navigation --------------------------------------------------------------------------


def test_nav_lists_every_page() -> None:
    text = (ROOT / "mkdocs.yml").read_text()
    nav = re.search(r"^nav:\n(?P<body>(?:[ \t]+.*\n|\n)+)", text, re.M)
    assert nav, "mkdocs.yml has no nav"
    listed = re.findall(r"^[ \t]*-[^\n]*?([\w./-]+\.md)[ \t]*$", nav["body"], re.M)
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(set(listed)) == pages, (
        f"not in the nav: {sorted(set(pages) - set(listed))}; "
        f"in the nav but missing: {sorted(set(listed) - set(pages))}"
    )


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "extract":
        sys.exit("usage: python tests/test_docs.py extract DEST")
    extract_guide(Path(sys.argv[2]))
