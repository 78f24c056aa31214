"""The Chrome-trace profiler (``enable_profiling`` / ``end_profiling``).

Events follow onnxruntime's format so existing tools read them: a JSON array of complete
events (``"ph": "X"``, ``ts``/``dur`` in microseconds). Session events are model loading,
session initialization and each ``model_run``; node events (``cat: "Node"``, name
``<node>_kernel_time``) carry the op, the provider that ran it, input and output types
and shapes, and sizes. Where a provider reports device time (a simulated NPU), it is in
``args.device_time_us``. The file opens in Perfetto or chrome://tracing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from .dtypes import onnx_elem_type, type_string
from .records import record

__all__ = ["Profiler", "ProfileSummary"]


Described = tuple[tuple[int, ...], np.dtype[Any]] | None


def _describe(value: Any, provider: Any) -> Described:
    """Shape and dtype of a tensor value, host or device (None for non-tensors)."""
    if isinstance(value, np.ndarray):
        return value.shape, value.dtype
    if value is None or isinstance(value, (list, dict)):
        return None
    try:
        return provider.describe(value)
    except Exception:  # a value the provider cannot describe is left out of the sizes
        return None


def _onnx_type_name(dtype: np.dtype[Any]) -> str:
    """onnxruntime's element type name ('float', 'int64') for the trace."""
    try:
        return type_string(onnx_elem_type(dtype))[len("tensor(") : -1]
    except TypeError:
        return str(dtype)


def _type_shape(described: Sequence[Described]) -> list[dict[str, list[int]]]:
    return [{_onnx_type_name(d[1]): list(d[0])} for d in described if d is not None]


def _nbytes(described: Sequence[Described]) -> int:
    return sum(int(np.prod(d[0], dtype=np.int64)) * d[1].itemsize for d in described if d is not None)


@record(frozen=True)
class ProfileSummary:
    """Where the time of the profiled runs went (microseconds, summed over runs).

    ``per_provider`` and ``per_op_type`` count kernel time (node and fused steps);
    ``copy_us`` the copies between memory spaces; ``device_us`` the device time providers
    report (a simulated NPU's cost model).
    """

    runs: int
    run_us: float
    per_provider: dict[str, float]
    per_op_type: dict[str, float]
    copy_us: float
    device_us: float

    def top_ops(self, n: int = 5) -> list[tuple[str, float]]:
        """The ``n`` op types that took the most time."""
        return sorted(self.per_op_type.items(), key=lambda kv: -kv[1])[:n]

    def __str__(self) -> str:
        per_run = self.run_us / max(self.runs, 1)
        providers = ", ".join(f"{p} {t / 1e3:.2f} ms" for p, t in self.per_provider.items())
        top = ", ".join(f"{op} {t / 1e3:.2f} ms" for op, t in self.top_ops())
        text = (f"{self.runs} run(s), {per_run / 1e3:.2f} ms per run; by provider: {providers}; "
                f"copies {self.copy_us / 1e3:.2f} ms; top ops: {top}")
        if self.device_us:
            text += f"; simulated device time {self.device_us / 1e3:.2f} ms"
        return text


class Profiler:
    """Collects trace events for one session and writes them on :meth:`end`."""

    def __init__(self, prefix: str, enabled: bool) -> None:
        self.prefix = prefix or "onyxrt_profile"
        self.enabled = enabled
        self.start_ns = time.perf_counter_ns()
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.pid = os.getpid()

    def _ts_us(self, perf_seconds: float) -> float:
        return (perf_seconds * 1e9 - self.start_ns) / 1e3

    def session_event(self, name: str, t0: float, t1: float, **args: Any) -> None:
        """Record a session-level event (perf_counter seconds)."""
        if not self.enabled:
            return
        event = {
            "cat": "Session",
            "pid": self.pid,
            "tid": threading.get_ident() % 100000,
            "dur": round((t1 - t0) * 1e6, 3),
            "ts": round(self._ts_us(t0), 3),
            "ph": "X",
            "name": name,
            "args": args,
        }
        with self._lock:
            self.events.append(event)

    def node_events(self, plan: Any, events: Sequence[tuple[int, float, float, list[Any], list[Any]]]) -> None:
        """Record one run's per-step timings from an execution plan."""
        if not self.enabled:
            return
        tid = threading.get_ident() % 100000
        recorded = []
        for si, t0, t1, args, outs in events:
            step = plan.steps[si]
            provider = plan.providers[step.provider]
            ins = [_describe(a, provider) for a in args]
            outputs = [_describe(o, provider) for o in outs]
            params = _nbytes([d for d, j in zip(ins, step.ins) if j in plan.initializer_slots])
            ev_args: dict[str, Any] = {
                "op_name": step.op_type,
                "provider": provider.name,
                "node_index": str(step.node_index),
                "input_type_shape": _type_shape(ins),
                "output_type_shape": _type_shape(outputs),
                "activation_size": str(_nbytes(ins) - params),
                "parameter_size": str(params),
                "output_size": str(_nbytes(outputs)),
                "kind": step.kind,
            }
            if step.kernel is not None:
                device_us = provider.device_time_us(step.kernel)
                if device_us is not None:
                    ev_args["device_time_us"] = device_us
            recorded.append({
                "cat": "Node",
                "pid": self.pid,
                "tid": tid,
                "dur": round((t1 - t0) * 1e6, 3),
                "ts": round(self._ts_us(t0), 3),
                "ph": "X",
                "name": f"{step.name}_kernel_time",
                "args": ev_args,
            })
        with self._lock:
            self.events.extend(recorded)

    def summary(self) -> ProfileSummary:
        """Totals of the events recorded so far."""
        with self._lock:
            events = list(self.events)
        runs = [e for e in events if e["cat"] == "Session" and e["name"] == "model_run"]
        per_provider: dict[str, float] = {}
        per_op: dict[str, float] = {}
        copy_us = device_us = 0.0
        for e in events:
            if e["cat"] != "Node":
                continue
            args = e["args"]
            device_us += float(args.get("device_time_us", 0.0))
            if args.get("kind") == "copy":
                copy_us += e["dur"]
                continue
            per_provider[args["provider"]] = per_provider.get(args["provider"], 0.0) + e["dur"]
            per_op[args["op_name"]] = per_op.get(args["op_name"], 0.0) + e["dur"]
        return ProfileSummary(len(runs), sum(e["dur"] for e in runs), per_provider, per_op,
                              copy_us, device_us)

    def end(self) -> str:
        """Write the trace to ``<prefix>_<timestamp>.json`` and return the file name."""
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self.prefix}_{stamp}.json"
        n = 1
        while os.path.exists(path):
            path = f"{self.prefix}_{stamp}_{n}.json"
            n += 1
        with self._lock:
            events = list(self.events)
            self.events.clear()
        with open(path, "w", encoding="utf-8") as fh:
            # As onnxruntime writes it: a JSON array, one event per line (tools read the
            # trace line by line as well as as a whole).
            fh.write("[\n" + ",\n".join(json.dumps(e, separators=(",", ":")) for e in events) + "\n]\n")
        self.enabled = False
        return path
