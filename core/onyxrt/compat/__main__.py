"""``python -m onyxrt.compat PROGRAM [ARGS]``: run a Python program with ``import onnxruntime``
resolved to onyxrt (see :mod:`onyxrt.compat`).

    python -m onyxrt.compat app.py --flag     # a script
    python -m onyxrt.compat -m package.cli    # a module, as python -m would
    python -m onyxrt.compat -c "import onnxruntime; print(onnxruntime.get_device())"

Child Python processes the program starts (multiprocessing, subprocess) get the shim too:
``PYTHONPATH`` is extended with :func:`onyxrt.compat.shim_pythonpath`.
"""

from __future__ import annotations

import os
import runpy
import sys

from . import install, shim_environment

USAGE = "usage: python -m onyxrt.compat (SCRIPT | -m MODULE | -c CODE) [ARGS...]"


def main(argv: list[str]) -> int:
    """Run the program that ``argv`` names under the shim; return its exit status."""
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help") or (argv[0] in ("-m", "-c") and len(argv) < 2):
        print(USAGE, file=sys.stderr if not argv or argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    os.environ.update(shim_environment())
    install()
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        code = compile(argv[1], "<string>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    elif argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        if not os.path.exists(argv[0]):
            print(f"python -m onyxrt.compat: can't open file {argv[0]!r}: no such file", file=sys.stderr)
            return 2
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
