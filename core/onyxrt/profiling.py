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

__all__ = ["Profiler"]


def _type_shape(values: Sequence[Any]) -> list[dict[str, list[int]]]:
    out = []
    for v in values:
        if isinstance(v, np.ndarray) or v is not None and hasattr(v, "shape") and hasattr(v, "dtype"):
            out.append({str(v.dtype): list(v.shape)})
    return out


def _nbytes(values: Sequence[Any]) -> int:
    return sum(int(v.nbytes) for v in values if isinstance(v, np.ndarray))


class Profiler:
    """Collects trace events for one session and writes them on :meth:`end`."""

    def __init__(self, prefix: str, enabled: bool) -> None:
        self.prefix = prefix or "onyxrt_profile"
        self.enabled = enabled
        self.start_ns = time.perf_counter_ns()
        self._wall_start_ns = time.time_ns()
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
            params = sum(
                int(a.nbytes) for a, j in zip(args, step.ins)
                if isinstance(a, np.ndarray) and j in plan.protected
            )
            ev_args: dict[str, Any] = {
                "op_name": step.op_type,
                "provider": provider.name,
                "node_index": str(step.node_index),
                "input_type_shape": _type_shape(args),
                "output_type_shape": _type_shape(outs),
                "activation_size": str(_nbytes(args) - params),
                "parameter_size": str(params),
                "output_size": str(_nbytes(outs)),
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
            json.dump(events, fh, indent=0)
        self.enabled = False
        return path
