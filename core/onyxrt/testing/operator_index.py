"""Check or rewrite the operator indexes of the installed kernel packages.

    python -m onyxrt.testing.operator_index            # fail (exit 1) if one is stale
    python -m onyxrt.testing.operator_index --write    # rewrite them

A package keeping an index (see :mod:`onyxrt.kernel_index`) computes it in a fresh
interpreter; the result is compared with (or written over) the package's ``_index.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PACKAGES", "stale_indexes", "main"]

#: The packages that keep an index, where installed.
PACKAGES = ("onyxrt_ops", "onyxrt_cpu.kernels")


def index_path(package: str) -> Path:
    """Where ``package`` keeps its generated index (found without importing the package)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"{package}: not an installed package")
    return Path(next(iter(spec.submodule_search_locations))) / "_index.py"


def fresh_index(package: str) -> str:
    """``package.render_index()`` computed in a fresh interpreter (nothing imported first)."""
    code = f"import sys, {package} as p; sys.stdout.write(p.render_index())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{package}: computing its operator index failed:\n{done.stderr}")
    return done.stdout


def installed(packages: Sequence[str] = PACKAGES) -> list[str]:
    """The ``packages`` installed here."""
    found = []
    for package in packages:
        try:
            index_path(package)
        except (LookupError, ModuleNotFoundError):
            continue
        found.append(package)
    return found


def stale_indexes(packages: Sequence[str] = PACKAGES, *, write: bool = False) -> list[str]:
    """The installed ``packages`` whose ``_index.py`` differs from what their modules
    define now (each rewritten when ``write``)."""
    stale = []
    for package in installed(packages):
        path = index_path(package)
        text = fresh_index(package)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(package)
        if write:
            path.write_text(text, encoding="utf-8")
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m onyxrt.testing.operator_index [--write] [PACKAGE...]``."""
    parser = argparse.ArgumentParser(prog="python -m onyxrt.testing.operator_index",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the stale indexes")
    parser.add_argument("packages", nargs="*", default=list(PACKAGES),
                        help=f"packages keeping an index (default: {' '.join(PACKAGES)})")
    args = parser.parse_args(argv)
    stale = stale_indexes(args.packages, write=args.write)
    if args.write:
        for package in stale:
            print(f"rewrote {index_path(package)}")
        return 0
    if stale:
        print(f"stale operator index: {', '.join(stale)}; rewrite with: "
              "python -m onyxrt.testing.operator_index --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
