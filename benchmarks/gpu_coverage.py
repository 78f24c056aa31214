"""How much of the ONNX node suite the GPU provider runs, under the simulated CuPy.

    python benchmarks/gpu_coverage.py            # op types, sessions wholly on the GPU, node share
    python benchmarks/gpu_coverage.py --refusals # plus every refusal reason, counted

For each node case of the installed onnx, a session with providers [CUDA, CPU] is created
(opset and shapes from the case); the placement report says which provider runs each node.
Counted: the op types the GPU registry has, sessions created, sessions whose every node runs
on the GPU, the share of nodes on the GPU, and (``--refusals``) why the GPU refused the rest.
Placement only: nothing is run.
"""

from __future__ import annotations

import argparse
import collections
import warnings

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refusals", action="store_true")
    args = parser.parse_args()
    import onyxrt as ort
    from onyxrt.testing.conformance import node_cases
    from onyxrt_gpu.kernels import registry
    from onyxrt_gpu.testing.provider_tests import simulated_gpu

    print(f"GPU registry: {len(registry.op_types())} op types")
    sessions = whole = nodes = on_gpu = 0
    reasons: collections.Counter[str] = collections.Counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in simulated_gpu(hip=False):
            for case in node_cases():
                try:
                    sess = ort.InferenceSession(case.model.SerializeToString(), providers=[CUDA, CPU])
                except Exception:
                    continue
                sessions += 1
                placed = sess.placement.nodes
                gpu = [n for n in placed if n.provider == CUDA]
                nodes += len(placed)
                on_gpu += len(gpu)
                whole += bool(placed) and len(gpu) == len(placed)
                if args.refusals:
                    for n in placed:
                        if n.provider != CUDA:
                            for r in sess.placement.refusals_for(n.node):
                                if r.provider == CUDA:
                                    reasons[r.reason[:110]] += 1
    print(f"node cases: {sessions} sessions, {whole} wholly on the GPU; "
          f"{on_gpu} of {nodes} nodes on the GPU ({100 * on_gpu / max(nodes, 1):.0f}%)")
    for reason, count in reasons.most_common(40):
        print(f"  {count:5}  {reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
