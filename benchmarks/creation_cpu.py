"""CPU time of one session creation (imports excluded), in fresh processes.

    python benchmarks/creation_cpu.py /tmp/exports/bert.onnx            # onyxrt, 5 processes
    python benchmarks/creation_cpu.py MODEL.onnx --runtime onnxruntime --runs 7

Each process imports the runtime (and, for onyxrt, its CPU provider, whose import the
first session would otherwise pay), then times ``InferenceSession(path)`` by
``time.process_time()``: on a shared machine the wall clock of a creation moves by ±40%
with other jobs, its CPU time much less. Prints the least and the median over the
processes. What ``benchmarks/families.py`` reports as creation is the wall clock with the
import included; this isolates the creation work a change touches.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

CHILD = """
import sys, time
if sys.argv[1] == "onyxrt":
    import onyxrt as rt
    import onyxrt_cpu.provider  # noqa: F401
else:
    import onnxruntime as rt
start = time.process_time()
rt.InferenceSession(sys.argv[2], providers=["CPUExecutionProvider"])
print((time.process_time() - start) * 1e3)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--runtime", choices=("onyxrt", "onnxruntime"), default="onyxrt")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes")
    args = parser.parse_args()
    times = [
        float(subprocess.run([sys.executable, "-c", CHILD, args.runtime, args.model], check=True,
                             capture_output=True, text=True).stdout.split()[-1])
        for _ in range(args.runs)
    ]
    print(f"{args.runtime} {args.model}: creation CPU time least {min(times):.0f} ms, "
          f"median {statistics.median(times):.0f} ms over {args.runs} processes")


if __name__ == "__main__":
    main()
