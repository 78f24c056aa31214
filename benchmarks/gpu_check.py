"""The GPU check: what onyxrt's CUDA provider does on a real device, in one command.

    python benchmarks/gpu_check.py                       # every phase, a report at the end
    python benchmarks/gpu_check.py --out results/        # plus the raw results as JSON
    python benchmarks/gpu_check.py --skip timing --conformance-seconds 120

Run it with onyxrt, onyxrt-ops, onyxrt-gpu and onyxrt-cuda installed in an environment
whose CuPy sees a GPU. Without a usable device it says why (the provider's own probe) and
exits with status 2. The phases, each bounded in time:

* ``tests`` — the GPU-marked tests (``pytest -m gpu``) of the GPU plugins;
* ``library`` — the operator library's node cases straight over the GPU providers' CuPy
  backend, and over torch on the GPU where torch is installed (``onyxrt_ops.conformance``);
* ``conformance`` — every ONNX node case through a session with providers [CUDA, CPU],
  beside the same case on the CPU alone, in ``--workers`` processes: how many pass, which
  fail on the GPU only (grouped by error), and how many run wholly on the GPU;
* ``exports`` — real torch exports (``--exports DIR``, else made with
  ``benchmarks/real_exports.py`` where torch and transformers are installed) at batch 1,
  sequence 128, each in its own process: onyxrt's CUDA provider plainly and with
  ``enable_cuda_graph=1`` (whether the graph replayed, its outputs against the plain
  run's), the per-run copies back to the host, and the CUDA outputs against the CPU
  provider's;
* ``timing`` — median latency of ``onyxrt.testing.models`` (ResNet-50, MobileNetV2,
  BERT-base, GPT-2) at batch 1 and 8 on onyxrt's CUDA provider (plain, and with
  ``enable_cuda_graph=1``: the graph's outputs are checked against the plain run's), on
  onyxrt's CPU provider and on onnxruntime with its best installed provider, each in its
  own process.

Phases that run out of time report what they finished; all of them together end within
``--budget-seconds`` (9 minutes by default). ``--dry-run`` probes the device and stops.

``nox -s gpu`` installs what this needs (the CuPy build for the driver's CUDA major, pytest,
onnxruntime-gpu), from PyPI or offline from a folder of wheels, then runs it: the functions
under "what to install" below are its plan (docs/gpu.md, "The GPU check").

Exit statuses: 0 the check ran (or, with ``--dry-run``, a usable device was found); 2 no
usable GPU here (the reason is printed).
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
PHASES = ("tests", "library", "conformance", "exports", "timing")
MODELS = ("resnet50", "mobilenet_v2", "bert", "gpt2")
#: Exit status when no usable GPU is found (``nox -s gpu`` exits with it too).
NO_GPU_STATUS = 2

# -- what to install (stdlib only: noxfile.py's `gpu` session imports this before anything
# is installed) ------------------------------------------------------------------------

#: The CUDA majors onyxrt-cuda has an extra for (``onyxrt-cuda[cuda12]``, ``[cuda13]``).
CUDA_MAJORS = (12, 13)
DEFAULT_CUDA_MAJOR = 12
#: onnxruntime-gpu for the timing comparison, per CUDA major. PyPI's default onnxruntime-gpu
#: wheel is built for CUDA 13 since 1.27; 1.26.0 is the last built for CUDA 12. The extras
#: bring its CUDA and cuDNN libraries from pip, as onyxrt-cuda's [ctk] brings CuPy's.
ONNXRUNTIME_GPU = {12: "onnxruntime-gpu[cuda,cudnn]==1.26.0", 13: "onnxruntime-gpu[cuda,cudnn]==1.31.1"}
#: The build backends of this checkout's packages (hatchling; setuptools for onyxrt-cpu, whose
#: other build requirement, numpy, is a dependency anyway): pip builds the packages from the
#: checkout, so an offline wheel folder must hold these too.
BUILD_REQUIREMENTS = ("hatchling>=1.27", "setuptools>=77")


def driver_cuda_major() -> tuple[int, str]:
    """The CUDA major version this machine's NVIDIA driver supports, and how it was found:
    ``nvidia-smi``'s header ("CUDA Version: 12.4"), else libcuda's ``cuDriverGetVersion``
    (12040 for 12.4), else 12 (no driver found: the default, said as such).

        >>> driver_cuda_major()  # doctest: +SKIP
        (13, 'nvidia-smi: CUDA Version 13.0')
    """
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30)
        match = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", out.stdout)
        if match:
            return int(match[1]), f"nvidia-smi: CUDA Version {match[1]}.{match[2]}"
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
            return version.value // 1000, f"libcuda cuDriverGetVersion: {version.value}"
    except (OSError, AttributeError):
        pass
    return DEFAULT_CUDA_MAJOR, f"no nvidia-smi or libcuda here: CUDA {DEFAULT_CUDA_MAJOR} by default"


def cuda_extra_major(major: int) -> int:
    """The onyxrt-cuda extra for a driver's CUDA major: a newer driver runs CUDA 13 builds;
    a driver older than CUDA 12 runs none of CuPy 14's builds (ValueError says so)."""
    if major < CUDA_MAJORS[0]:
        raise ValueError(f"the NVIDIA driver supports CUDA {major}; onyxrt-cuda needs CUDA 12 or 13 "
                         "(CuPy 14): update the driver")
    return min(major, CUDA_MAJORS[-1])


def install_requirements(major: int, extra: tuple[str, ...] | list[str] = ()) -> list[str]:
    """What ``nox -s gpu`` installs for a CUDA ``major`` (12 or 13), in one pip call, from the
    checkout's root: the core, the operator library, the CPU, GPU and CUDA providers (with
    the CuPy extra for ``major``), ``extra`` (the session's test pins) and onnxruntime-gpu."""
    if major not in CUDA_MAJORS:
        raise ValueError(f"CUDA {major}: onyxrt-cuda has extras for CUDA {', '.join(map(str, CUDA_MAJORS))}")
    return [".", "./plugins/ops", "./plugins/cpu", "./plugins/gpu", f"./plugins/cuda[cuda{major}]",
            *extra, ONNXRUNTIME_GPU[major]]


def pip_install_args(requirements: list[str], wheels: Path | None = None) -> list[str]:
    """The arguments after ``pip install``: offline (``wheels``, a folder filled by
    :func:`pip_download_command`) pip reads no index, only that folder."""
    if wheels is None:
        return list(requirements)
    return ["--no-index", "--find-links", str(wheels), *requirements]


def pip_download_command(requirements: list[str], folder: str = "DIR") -> list[str]:
    """The command that fills an offline wheel folder on a networked machine (same Python
    version and OS as the GPU machine, in this checkout's root): every dependency of
    ``requirements`` and the build backends; the checkout's own packages are built from it."""
    return ["python", "-m", "pip", "download", "-d", folder, *requirements, *BUILD_REQUIREMENTS]


def describe_install(major: int, found: str, requirements: list[str], python: str) -> str:
    """What ``nox -s gpu -- --print-requirements`` prints: the list, and how to go offline."""
    return "\n".join([
        f"# the GPU check for CUDA {major} ({found}); Python {python}",
        "# requirements (installed in one pip call from this checkout's root):",
        *requirements,
        "# offline: on a networked machine with Python " + python + " and the same OS, in this checkout:",
        shlex.join(pip_download_command(requirements)),
        "# then on the GPU machine, with DIR copied beside the checkout:",
        shlex.join(["nox", "-s", "gpu", "--", "--wheels", "DIR", "--cuda", str(major)]),
    ])


def _device_status() -> tuple[bool, str]:
    from onyxrt.discovery import catalog

    try:
        status = catalog().status(CUDA)
    except KeyError:
        return False, "onyxrt-cuda is not installed (fix: pip install ./plugins/gpu ./plugins/cuda)"
    if status.usable:
        details = ", ".join(f"{k} {v}" for k, v in status.details.items())
        return True, details
    return False, f"{status.reason}" + (f" (fix: {status.fix})" if status.fix else "")


# -- conformance shard (a child process) --------------------------------------------------


def _shard(index: int, count: int, out: Path) -> int:
    """Run every ``count``-th node case from ``index`` on CPU and on [CUDA, CPU]; one JSON
    line per case, flushed as it goes (the parent may stop this process at its deadline)."""
    from onyxrt import backend
    from onyxrt.testing.conformance import check_case, node_cases
    from onyxrt.testing.conformance import run_cases as run_on

    cases = node_cases()[index::count]
    with out.open("w") as sink:
        for case in cases:
            cpu = run_on([case], "CPU")[0]
            gpu = run_on([case], "CUDA")[0]
            whole = False
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    rep = backend.prepare(case.model, "CUDA")
                placed = rep.session.placement.nodes
                whole = bool(placed) and all(n.provider == CUDA for n in placed)
            except Exception:
                pass
            detail = ""
            if cpu.passed and not gpu.passed and gpu.error.startswith("AssertionError"):
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        check_case(case, "CUDA")
                except AssertionError as exc:  # numpy's message: mismatched count, max differences
                    detail = " | ".join(line.strip() for line in str(exc).splitlines()
                                        if line.strip().startswith(("Mismatched", "Max")))
            sink.write(json.dumps({"name": case.name, "cpu": cpu.passed, "gpu": gpu.passed,
                                   "error": gpu.error, "detail": detail, "whole": whole}) + "\n")
            sink.flush()
    return 0


def _conformance(workers: int, seconds: float, folder: Path) -> dict[str, Any]:
    procs = []
    for i in range(workers):
        path = folder / f"shard{i}.jsonl"
        procs.append((subprocess.Popen([sys.executable, __file__, "--shard", f"{i}/{workers}", str(path)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), path))
    deadline = time.monotonic() + seconds
    finished = True
    for proc, _ in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            finished = False
    rows = []
    for _, path in procs:
        if path.exists():
            rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    gpu_only = [r for r in rows if r["cpu"] and not r["gpu"]]
    by_error: dict[str, list[str]] = collections.defaultdict(list)
    for r in gpu_only:
        by_error[r["error"][:140]].append(r["name"] + (f" ({r['detail']})" if r.get("detail") else ""))
    return {
        "cases": len(rows), "finished": finished,
        "passed_gpu": sum(r["gpu"] for r in rows), "passed_cpu": sum(r["cpu"] for r in rows),
        "wholly_on_gpu": sum(r["whole"] for r in rows),
        "wholly_on_gpu_passed": sum(r["whole"] and r["gpu"] for r in rows),
        "failed_on_gpu_only": len(gpu_only),
        "gpu_only_errors": {k: v for k, v in sorted(by_error.items(), key=lambda kv: -len(kv[1]))},
        "worker_stderr": [p.stderr.read()[-2000:] for p, _ in procs if p.stderr and p.returncode],
    }


# -- timing (a child process per runtime, model and batch) --------------------------------


def _time_one(runtime: str, model_name: str, batch: int, runs: int) -> dict[str, Any]:
    import numpy as np

    from onyxrt.testing import models

    builders = {
        "resnet50": lambda: models.resnet(batch=batch),
        "mobilenet_v2": lambda: models.mobilenet_v2(batch=batch),
        "bert": lambda: models.bert_encoder(batch=batch),
        "gpt2": lambda: models.gpt2(batch=batch),
    }
    model = builders[model_name]().SerializeToString()
    if runtime == "onnxruntime":
        import onnxruntime as rt

        # onnxruntime-gpu[cuda,cudnn]'s CUDA and cuDNN libraries are pip packages its CUDA
        # provider does not find by itself on Linux: preload them. Without them (or with a
        # CPU-only onnxruntime, which has no preload_dlls) it uses the system's, if any.
        try:
            rt.preload_dlls()
        except Exception:
            pass
        providers = [p for p in (CUDA, CPU) if p in rt.get_available_providers()]
    else:
        import onyxrt as rt  # type: ignore[no-redef]

        providers = {"onyxrt-cuda": [CUDA, CPU], "onyxrt-cuda-graph": [(CUDA, {"enable_cuda_graph": "1"}), CPU],
                     "onyxrt-cpu": [CPU]}[runtime]
    start = time.perf_counter()
    session = rt.InferenceSession(model, providers=providers)
    created = time.perf_counter() - start
    feeds = _feeds_for(session, batch)
    first = session.run(None, feeds)
    for _ in range(2):
        last = session.run(None, feeds)
    extra: dict[str, Any] = {}
    if runtime == "onyxrt-cuda-graph":
        # The first run is plain, the second captured, the third a replay: same results.
        extra["graph_vs_plain_max_abs"] = max(float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
                                              for a, b in zip(first, last))
        replay = session._plan.graph_replay
        extra["replays"] = replay.replays if replay is not None else None
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return {"runtime": runtime, "providers": session.get_providers(), "model": model_name, "batch": batch,
            "median_ms": 1000 * statistics.median(times), "created_s": created, **extra}


def _timing(models: list[str], batches: list[int], runtimes: list[str], runs: int,
            seconds: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + seconds
    results: list[dict[str, Any]] = []
    for batch in batches:
        for name in models:
            for runtime in runtimes:
                left = deadline - time.monotonic()
                if left < 5:
                    results.append({"runtime": runtime, "model": name, "batch": batch, "error": "out of time"})
                    continue
                try:
                    out = subprocess.run([sys.executable, __file__, "--time-one", runtime, name, str(batch), str(runs)],
                                         capture_output=True, text=True, timeout=left)
                    if out.returncode:
                        results.append({"runtime": runtime, "model": name, "batch": batch,
                                        "error": (out.stderr.strip().splitlines() or ["?"])[-1][:200]})
                    else:
                        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
                except subprocess.TimeoutExpired:
                    results.append({"runtime": runtime, "model": name, "batch": batch, "error": "out of time"})
    return results


def _print_timing(results: list[dict[str, Any]]) -> None:
    table: dict[tuple[str, int], dict[str, Any]] = collections.defaultdict(dict)
    for r in results:
        table[(r["model"], r["batch"])][r["runtime"]] = r
    print(f"{'model':14}{'batch':>6}{'onyxrt CUDA ms':>16}{'+ CUDA graph ms':>17}{'onyxrt CPU ms':>15}"
          f"{'onnxruntime ms':>16}  onnxruntime providers; graph vs plain max |diff|")
    for (model, batch), row in table.items():
        cells = []
        for runtime in ("onyxrt-cuda", "onyxrt-cuda-graph", "onyxrt-cpu", "onnxruntime"):
            r = row.get(runtime, {})
            cells.append(f"{r['median_ms']:.2f}" if "median_ms" in r else r.get("error", "-")[:14])
        ort_providers = ",".join(p.replace("ExecutionProvider", "") for p in row.get("onnxruntime", {}).get("providers", []))
        graph = row.get("onyxrt-cuda-graph", {})
        diff = f"{graph['graph_vs_plain_max_abs']:.3g} ({graph.get('replays')} replays)" if "graph_vs_plain_max_abs" in graph else "-"
        print(f"{model:14}{batch:>6}{cells[0]:>16}{cells[1]:>17}{cells[2]:>15}{cells[3]:>16}  {ort_providers}; {diff}")


# -- real exports (a child process per model) ------------------------------------------------


def _feeds_for(session: Any, batch: int = 1, seq: int = 128) -> dict[str, Any]:
    """Deterministic feeds: free dims batch (first) and seq (others); ids in [0, 1000),
    masks ones, floats standard normal."""
    import numpy as np

    rng = np.random.default_rng(0)
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else (batch if i == 0 else seq) for i, d in enumerate(arg.shape)]
        if "int" in arg.type:
            feeds[arg.name] = (np.ones(shape, np.int64) if "mask" in arg.name
                               else rng.integers(0, 1000, size=shape).astype(np.int64))
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _time_export(path: str, runs: int) -> dict[str, Any]:
    """One model file on onyxrt's CUDA provider, plainly and with CUDA graphs (see the
    module's docstring, ``exports``)."""
    import numpy as np

    import onyxrt as rt

    row: dict[str, Any] = {"model": Path(path).stem}
    outputs = {}
    for label, cuda in (("plain", CUDA), ("graph", (CUDA, {"enable_cuda_graph": "1"}))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session = rt.InferenceSession(path, providers=[cuda, CPU])
        feeds = _feeds_for(session)
        for _ in range(3):
            out = session.run(None, feeds)[0]
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - t0)
        row[f"{label}_ms"] = 1000 * statistics.median(times)
        outputs[label] = np.asarray(out, dtype=np.float64)
        if label == "graph":
            replay = session._plan.graph_replay
            row["replays"] = 0 if replay is None else replay.replays
            row["graph_failures"] = None if replay is None else replay.failures
        row["copies_to_host"] = sum(c.per_run and c.dst == "cpu" for c in session.placement.copies)
    row["graph_vs_plain_max_abs"] = float(np.max(np.abs(outputs["graph"] - outputs["plain"])))
    cpu = rt.InferenceSession(path, providers=[CPU])
    row["cuda_vs_cpu_max_abs"] = float(np.max(np.abs(outputs["plain"] - cpu.run(None, feeds)[0])))
    return row


def _exports(folder: Path | None, work: Path, runs: int, seconds: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + seconds
    if folder is None:
        folder = work / "exports"
        script = Path(__file__).resolve().parent / "real_exports.py"
        try:
            out = subprocess.run([sys.executable, str(script), "--out", str(folder)], capture_output=True,
                                 text=True, timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return [{"model": "(exports)", "error": "out of time making the exports"}]
        if out.returncode:
            return [{"model": "(exports)", "error": "no exports: " + (out.stderr.strip().splitlines() or ["?"])[-1][:200]}]
    rows = []
    for path in sorted(folder.glob("*.onnx")):
        left = deadline - time.monotonic()
        if left < 5:
            rows.append({"model": path.stem, "error": "out of time"})
            continue
        try:
            out = subprocess.run([sys.executable, __file__, "--time-export", str(path), str(runs)],
                                 capture_output=True, text=True, timeout=left)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else
                        {"model": path.stem, "error": (out.stderr.strip().splitlines() or ["?"])[-1][:200]})
        except subprocess.TimeoutExpired:
            rows.append({"model": path.stem, "error": "out of time"})
    return rows


def _print_exports(rows: list[dict[str, Any]]) -> None:
    print(f"{'export':14}{'CUDA ms':>10}{'+ graph ms':>12}{'replays':>9}{'to host':>9}"
          f"{'graph vs plain':>16}{'CUDA vs CPU':>13}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:14}  {r['error']}")
            continue
        print(f"{r['model']:14}{r['plain_ms']:>10.2f}{r['graph_ms']:>12.2f}{r['replays']:>9}"
              f"{r['copies_to_host']:>9}{r['graph_vs_plain_max_abs']:>16.3g}{r['cuda_vs_cpu_max_abs']:>13.3g}")


# -- main --------------------------------------------------------------------------------


def _run_child(cmd: list[str], seconds: float) -> tuple[int, str]:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds)
        return out.returncode, out.stdout + out.stderr
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, text + f"\n(stopped after {seconds:.0f} s)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for the raw results (JSON)")
    parser.add_argument("--skip", default="", help=f"comma-separated phases to skip: {', '.join(PHASES)}")
    parser.add_argument("--workers", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)))
    # The phases' bounds: tests, conformance, exports, then timing, one after the other
    # (120 + 180 + 120 + 120 s); the library runs beside the first two. --budget-seconds
    # caps them all.
    parser.add_argument("--conformance-seconds", type=float, default=180)
    parser.add_argument("--exports-seconds", type=float, default=120)
    parser.add_argument("--exports", type=Path, help="a folder of real exports (*.onnx) for the exports phase "
                        "(default: made with benchmarks/real_exports.py where torch and transformers are installed)")
    parser.add_argument("--library-seconds", type=float, default=240, help="from the start of the check")
    parser.add_argument("--tests-seconds", type=float, default=120)
    parser.add_argument("--timing-seconds", type=float, default=120)
    parser.add_argument("--budget-seconds", type=float, default=540,
                        help="every phase ends by then (default 9 minutes)")
    parser.add_argument("--dry-run", action="store_true",
                        help="probe the device, say what it found, run no phase")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--runtimes", default="onyxrt-cuda,onyxrt-cuda-graph,onyxrt-cpu,onnxruntime",
                        help="which of onyxrt-cuda, onyxrt-cuda-graph, onyxrt-cpu, onnxruntime to time")
    parser.add_argument("--shard", nargs=2, metavar=("I/N", "FILE"), help=argparse.SUPPRESS)
    parser.add_argument("--time-one", nargs=4, metavar=("RUNTIME", "MODEL", "BATCH", "RUNS"), help=argparse.SUPPRESS)
    parser.add_argument("--time-export", nargs=2, metavar=("PATH", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.shard:
        i, n = (int(v) for v in args.shard[0].split("/"))
        return _shard(i, n, Path(args.shard[1]))
    if args.time_one:
        runtime, model, batch, runs = args.time_one
        print(json.dumps(_time_one(runtime, model, int(batch), int(runs))))
        return 0
    if args.time_export:
        print(json.dumps(_time_export(args.time_export[0], int(args.time_export[1]))))
        return 0

    started = time.monotonic()
    usable, said = _device_status()
    if not usable:
        print(f"gpu_check: no usable GPU here — {said}", file=sys.stderr)
        return NO_GPU_STATUS
    print(f"CUDAExecutionProvider: usable ({said})", flush=True)
    if args.dry_run:
        print("gpu_check: dry run, no phase run")
        return 0
    budget_end = started + args.budget_seconds

    def bounded(seconds: float) -> float:
        """A phase's seconds, cut to what is left of the budget."""
        return max(1.0, min(seconds, budget_end - time.monotonic()))

    library_end = started + min(args.library_seconds, args.budget_seconds)
    skip = {s for s in args.skip.split(",") if s}
    folder = args.out or Path(os.environ.get("TMPDIR", "/tmp")) / "onyxrt-gpu-check"
    folder.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"device": said}
    root = Path(__file__).resolve().parent.parent

    library_procs = []
    if "library" not in skip:
        backends = ["onyxrt_gpu.kernels._common:BACKEND"]
        try:
            import torch

            if torch.cuda.is_available():
                backends.append("torch-cuda")
        except ImportError:
            pass
        for b in backends:
            log = folder / f"library-{b.split(':')[0].replace('.', '_')}.txt"
            library_procs.append((b, log, subprocess.Popen(
                [sys.executable, "-m", "onyxrt_ops.conformance", "--backend", b],
                stdout=log.open("w"), stderr=subprocess.STDOUT)))
    if "tests" not in skip:
        tests = [str(root / p) for p in ("plugins/cuda/tests", "plugins/gpu/tests") if (root / p).is_dir()]
        rc, text = _run_child([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *tests],
                              bounded(args.tests_seconds))
        tail = "\n".join(text.strip().splitlines()[-15:])
        report["tests"] = {"rc": rc, "tail": tail}
        print(f"\n== GPU-marked tests (rc {rc})\n{tail}", flush=True)
    if "conformance" not in skip:
        result = _conformance(args.workers, bounded(args.conformance_seconds), folder)
        report["conformance"] = result
        print(f"\n== node conformance through sessions [CUDA, CPU] ({'complete' if result['finished'] else 'stopped at the deadline'})")
        print(f"cases run {result['cases']}: pass with the GPU {result['passed_gpu']}, on the CPU alone "
              f"{result['passed_cpu']}; wholly on the GPU {result['wholly_on_gpu']} "
              f"({result['wholly_on_gpu_passed']} of them pass); fail only with the GPU {result['failed_on_gpu_only']}")
        for error, names in list(result["gpu_only_errors"].items())[:25]:
            print(f"  {len(names):4}  {error}\n        {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}")
        for err in result["worker_stderr"]:
            print("  worker stderr:", err[-500:])
        sys.stdout.flush()
    for name, log, proc in library_procs:
        try:
            proc.wait(timeout=max(1.0, library_end - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        text = log.read_text()
        report.setdefault("library", {})[name] = text
        lines = text.strip().splitlines()
        print(f"\n== operator library over {name} (rc {proc.returncode})")
        print("\n".join(lines[:40]))
        sys.stdout.flush()
    if "exports" not in skip:
        rows = _exports(args.exports, folder, args.runs, bounded(args.exports_seconds))
        report["exports"] = rows
        print(f"\n== real exports at batch 1, median of {args.runs} runs (plain and with enable_cuda_graph=1)")
        _print_exports(rows)
        sys.stdout.flush()
    if "timing" not in skip:
        results = _timing(args.models.split(","), [int(b) for b in args.batch.split(",")],
                          args.runtimes.split(","), args.runs,
                          bounded(args.timing_seconds))
        report["timing"] = results
        print("\n== latency, median of", args.runs, "runs after 3 warm-up runs (each runtime in its own process)")
        _print_timing(results)
    (folder / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"\nraw results: {folder / 'gpu_check.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
