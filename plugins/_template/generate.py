"""Generate a provider package from this template.

    python plugins/_template/generate.py --name MyAccel --dest DIR

writes ``DIR/onyxrt-myaccel``: a kernel-registry provider ``MyAccelExecutionProvider``
(Relu, Add and Mul on numpy, float32) with an option schema and a probe, its entry point
under ``onyxrt.providers``, a pyproject, and tests that subclass the core's
``ProviderConformance`` and run a model beside the CPU provider. It passes them as
generated; ``pip install DIR/onyxrt-myaccel`` makes it appear in
``onyxrt.get_available_providers()``. Needs nothing but the standard library.

The files live in ``skeleton/`` with a ``.tmpl`` suffix (so neither pytest nor ruff
mistakes them for this repository's code); ``__module__`` in a path and ``{{key}}`` in a
file are replaced by the values :func:`substitutions` derives from the name.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

SKELETON = Path(__file__).resolve().parent / "skeleton"
SUFFIX = ".tmpl"
DEVICE_TYPES = ("cpu", "gpu", "npu")
_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def substitutions(name: str, device_type: str = "npu") -> dict[str, str]:
    """The template's placeholders for a provider called ``name`` (CamelCase)."""
    if not _NAME.match(name):
        raise ValueError(
            f"--name must be CamelCase letters and digits starting with a capital, such as "
            f"MyAccel, got {name!r}"
        )
    if name.endswith("ExecutionProvider"):
        raise ValueError(
            f"--name is the short name: {name[: -len('ExecutionProvider')]!r}, not {name!r}"
        )
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"--device-type must be one of {DEVICE_TYPES}, got {device_type!r}")
    lower = name.lower()
    return {
        "Name": name,
        "provider": f"{name}ExecutionProvider",
        "entry": lower,
        "module": f"onyxrt_{lower}",
        "dist": f"onyxrt-{lower}",
        "device_type": device_type,
    }


def render(text: str, values: dict[str, str], source: Path) -> str:
    """Replace every ``{{key}}``; an unknown key is an error naming the file."""

    def value(match: re.Match[str]) -> str:
        key = match[1]
        if key not in values:
            raise KeyError(f"{source}: unknown placeholder {{{{{key}}}}}")
        return values[key]

    return _PLACEHOLDER.sub(value, text)


def generate(name: str, dest: Path, *, device_type: str = "npu", force: bool = False) -> Path:
    """Write the package for ``name`` under ``dest``; return its folder."""
    values = substitutions(name, device_type)
    target = dest / values["dist"]
    if target.exists() and any(target.iterdir()) and not force:
        raise FileExistsError(f"{target} exists and is not empty (pass --force to overwrite)")
    for source in sorted(SKELETON.rglob(f"*{SUFFIX}")):
        relative = source.relative_to(SKELETON).as_posix().replace("__module__", values["module"])
        path = target / relative[: -len(SUFFIX)]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            render(source.read_text(encoding="utf-8"), values, source), encoding="utf-8"
        )
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate an onyxrt provider package.")
    parser.add_argument("--name", required=True, help="short CamelCase name, e.g. MyAccel")
    parser.add_argument("--dest", required=True, type=Path, help="folder to create the package in")
    parser.add_argument(
        "--device-type",
        default="npu",
        choices=DEVICE_TYPES,
        help="the device type the provider reports (default: npu)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing package folder")
    args = parser.parse_args(argv)
    try:
        target = generate(args.name, args.dest, device_type=args.device_type, force=args.force)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    values = substitutions(args.name, args.device_type)
    print(f"wrote {target}: {values['provider']} in {values['dist']}")
    print(f"next: pip install {target} && pytest {target / 'tests'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
