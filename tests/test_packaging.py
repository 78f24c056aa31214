"""The distributions' metadata, as PyPI and pip see it: a license file in every
distribution, a README for every PyPI page without links that break there, classifiers,
the CUDA provider's extras, anchored sdist patterns. (``nox -s wheels`` builds and
installs the artifacts themselves.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = [ROOT] + sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
LICENSE = (ROOT / "LICENSE").read_text()


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_every_distribution_has_license_readme_and_classifiers(folder):
    project = _project(folder)
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert (folder / "LICENSE").read_text() == LICENSE, "a copy of the root LICENSE, unchanged"
    assert "Apache License" in LICENSE and "Version 2.0" in LICENSE
    readme = folder / project["readme"]
    assert readme.is_file() and len(readme.read_text()) > 300, f"{readme} is the PyPI page"
    assert project["authors"]
    classifiers = project["classifiers"]
    for version in ("3.10", "3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers), "PEP 639: the license expression only"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_pypi_pages_have_no_relative_links(folder):
    """Relative links (docs/x.md) resolve on the repository host, not on PyPI."""
    text = (folder / _project(folder)["readme"]).read_text()
    for target in re.findall(r"\]\(([^)]+)\)", text):
        assert re.match(r"https?://", target), f"relative link {target!r} breaks on PyPI"


def test_core_pypi_page_is_not_the_checkout_readme():
    assert _project(ROOT)["readme"] == "core/README.md"
    page = (ROOT / "core/README.md").read_text()
    assert "pip install onyxrt" in page and "nox" not in page


def test_root_sdist_patterns_are_anchored():
    sdist = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["sdist"]
    assert all(p.startswith("/") for p in sdist["include"]), "an unanchored pattern matches in every folder"
    assert "/core/README.md" in sdist["include"] and "/LICENSE" in sdist["include"]


def test_cuda_provider_brings_cupy_through_extras_per_cuda_major():
    project = _project(ROOT / "plugins/cuda")
    assert not any(d.startswith("cupy") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert extras["cuda12"] == ["cupy-cuda12x[ctk]>=14.0"]
    assert extras["cuda13"] == ["cupy-cuda13x[ctk]>=14.0"]
    assert "cupy-rocm-7-0>=14.0" in _project(ROOT / "plugins/rocm")["dependencies"]


def test_cpu_wheels_configuration():
    pyproject = tomllib.loads((ROOT / "plugins/cpu/pyproject.toml").read_text())
    cibw = pyproject["tool"]["cibuildwheel"]
    assert cibw["build"] == ["cp310-*", "cp311-*", "cp312-*", "cp313-*"]
    assert pyproject["tool"]["cibuildwheel"]["linux"]["manylinux-x86_64-image"] == "manylinux_2_28"


def test_template_package_declares_readme_and_license():
    skeleton = ROOT / "plugins/_template/skeleton"
    text = (skeleton / "pyproject.toml.tmpl").read_text()
    assert 'readme = "README.md"' in text and "license = " in text and "license-files" in text
    assert (skeleton / "LICENSE.tmpl").read_text() == LICENSE
