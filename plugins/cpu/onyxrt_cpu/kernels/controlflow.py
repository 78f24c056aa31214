"""CPU kernels: control flow (If, Loop, Scan).

Bodies run through :meth:`KernelInfo.subgraph`, which the core builds once per body at
session creation with the session's providers (so a body's nodes may run on another
device; its placement is in ``PlacementReport.subgraphs``). Values a body reads from
the enclosing graph arrive after the node's explicit inputs, in the order of
``info.implicit_inputs``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.graph import tensor_array
from onyxrt.kernels import Kernel, KernelInfo, parse_attribute
from onyxrt.limits import check_bytes, check_terminated, current_limits, output_of

from . import registry

_VERSIONS = (1, 11, 13, 16, 19, 21, 23, 24, 25)

#: Bytes a collected scan element holds beyond its data (the ndarray object, the list
#: slot): counted so a billion tiny elements are stopped too, not only big ones.
_ELEMENT_OVERHEAD = 128


def _truth(value: Any, what: str, node: str) -> bool:
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"{node}: {what} must hold exactly one value, got shape {arr.shape}")
    return bool(arr.reshape(-1)[0])


class _ControlFlow(Kernel):
    """Splits the node's inputs into explicit ones and outer-scope values."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.n_explicit = len(info.input_names)
        self.explicit_names = info.input_names
        self.implicit = info.implicit_inputs

    def _split(self, inputs: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        n = self.n_explicit
        # A body may also read a value the node takes explicitly (an inner If testing the
        # same condition): implicit_inputs leave those out, so they are added from here.
        outer = {name: v for name, v in zip(self.explicit_names, inputs[:n]) if name}
        outer.update(zip(self.implicit, inputs[n:]))
        return inputs[:n], outer


@registry.register("If", since=_VERSIONS)
class If(_ControlFlow):
    """Run ``then_branch`` or ``else_branch`` depending on a boolean scalar."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.then_branch = info.subgraph("then_branch")
        self.else_branch = info.subgraph("else_branch")

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        (cond,), outer = self._split(inputs)
        branch = self.then_branch if _truth(cond, "cond", self.info.node_name) else self.else_branch
        return tuple(branch.run((), outer))


def _element_bytes(value: Any) -> int:
    """What a collected scan element counts against the tensor limit (its data and
    :data:`_ELEMENT_OVERHEAD`)."""
    return (value.nbytes if isinstance(value, np.ndarray) else np.asarray(value).nbytes) + _ELEMENT_OVERHEAD


def _stack(values: list[Any], axis: int = 0) -> np.ndarray:
    return np.stack([np.asarray(v) for v in values], axis=axis)


@registry.register("Loop", since=_VERSIONS)
class Loop(_ControlFlow):
    """Iterate ``body`` while the trip count and the condition allow.

    Outputs are the final loop-carried values followed by the scan outputs, each stacked
    along a new first axis. ``RunOptions.terminate`` is honoured between iterations, and
    a scan output growing past ``session.max_tensor_bytes`` stops the loop (a huge trip
    count must not fill memory before the error).
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.body = info.subgraph("body")
        self.n_carried = self.n_explicit - 2
        n_body_out = len(self.body.output_names)
        self.n_scan = n_body_out - 1 - self.n_carried
        if self.n_scan < 0:
            raise InvalidGraph(
                f"Loop node {info.node_name!r}: the body has {n_body_out} outputs but the node "
                f"carries {self.n_carried} values (the body must output cond + carried + scans)"
            )

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        explicit, outer = self._split(inputs)
        trip, cond = explicit[0], explicit[1]
        carried = list(explicit[2:])
        max_trip = int(np.asarray(trip).reshape(-1)[0]) if trip is not None else None
        keep = _truth(cond, "cond", self.info.node_name) if cond is not None else True
        scans: list[list[Any]] = [[] for _ in range(self.n_scan)]
        scan_bytes = [0] * self.n_scan
        node = self.info.node_name
        limit = current_limits().max_tensor_bytes
        i = 0
        while keep and (max_trip is None or i < max_trip):
            check_terminated(node)
            outs = self.body.run([np.array(i, dtype=np.int64), np.array(keep), *carried], outer)
            keep = _truth(outs[0], "the body's cond output", node)
            carried = list(outs[1 : 1 + self.n_carried])
            for k, v in enumerate(outs[1 + self.n_carried :]):
                scans[k].append(v)
                scan_bytes[k] += _element_bytes(v)
                if scan_bytes[k] > limit:  # (the message only then: formatting it costs a microsecond)
                    check_bytes(scan_bytes[k], output_of(self.info, f"scan output {k} (after {i + 1} iterations)"))
            i += 1
        stacked = []
        for k, values in enumerate(scans):
            if values:
                stacked.append(_stack(values))
            else:
                stacked.append(self._empty_scan(k))
        return (*carried, *stacked)

    def _empty_scan(self, k: int) -> np.ndarray:
        vt = self.info.output_types[self.n_carried + k] if self.info.output_types else None
        dtype = vt.dtype if vt is not None and vt.dtype is not None else np.float32
        rank = len(vt.shape) if vt is not None and vt.shape is not None else 1
        return np.zeros((0,) + (0,) * max(rank - 1, 0), dtype=dtype)


@registry.register("Scan", since=(9, 11, 16, 19, 21, 23, 24, 25))
class Scan(_ControlFlow):
    """Run ``body`` once per slice of the scan inputs, threading state through."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.body = info.subgraph("body")
        self.n_scan_in = int(info.attr("num_scan_inputs"))
        self.n_state = self.n_explicit - self.n_scan_in
        self.n_scan_out = len(self.body.output_names) - self.n_state
        m, k = self.n_scan_in, self.n_scan_out
        self.in_axes = list(info.attr("scan_input_axes", [0] * m))
        self.in_dirs = list(info.attr("scan_input_directions", [0] * m))
        self.out_axes = list(info.attr("scan_output_axes", [0] * k))
        self.out_dirs = list(info.attr("scan_output_directions", [0] * k))
        if len(self.in_axes) != m or len(self.in_dirs) != m or len(self.out_axes) != k or len(self.out_dirs) != k:
            raise InvalidGraph(
                f"Scan node {info.node_name!r}: scan axis/direction attributes do not match "
                f"{m} scan inputs and {k} scan outputs"
            )
        plain = (self.n_state, m, k) == (1, 1, 1) and not any(self.in_axes + self.in_dirs + self.out_axes + self.out_dirs)
        #: For a body that computes distances (see :func:`_distance_body`): (absolute
        #: norm, square root); None for any other body.
        self.distance = _distance_body(info.attributes["body"]) if plain else None

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        explicit, outer = self._split(inputs)
        if self.distance is not None:
            found = self._distances(*explicit)
            if found is not None:
                return found
        states = list(explicit[: self.n_state])
        scan_in = [np.asarray(x) for x in explicit[self.n_state :]]
        axes = [a + x.ndim if a < 0 else a for a, x in zip(self.in_axes, scan_in)]
        lengths = {x.shape[a] for x, a in zip(scan_in, axes)}
        if len(lengths) > 1:
            raise ValueError(f"Scan node {self.info.node_name!r}: scan inputs differ in length {sorted(lengths)}")
        steps = lengths.pop() if lengths else 0
        collected: list[list[Any]] = [[] for _ in range(self.n_scan_out)]
        collected_bytes = [0] * self.n_scan_out
        # Read once: per iteration, only the cheap tests (a Scan over a model's 400 rows
        # spent more on its own bookkeeping than in its three-node body).
        limits = current_limits()
        run_options, limit = limits.run_options, limits.max_tensor_bytes
        # Slice t of each scan input as a view (the body never writes to its inputs).
        leading = [(slice(None),) * a for a in axes]
        n_state = self.n_state
        for t in range(steps):
            if run_options is not None and run_options.terminate:
                check_terminated(self.info.node_name)
            slices = [x[lead + (steps - 1 - t if d else t,)]
                      for x, lead, d in zip(scan_in, leading, self.in_dirs)]
            outs = self.body.run([*states, *slices], outer)
            states = list(outs[:n_state])
            for k, v in enumerate(outs[n_state:]):
                collected[k].append(v)
                collected_bytes[k] += _element_bytes(v)
                if collected_bytes[k] > limit:
                    check_bytes(collected_bytes[k], output_of(self.info, f"scan output {k} (after {t + 1} steps)"))
        results = []
        for k, values in enumerate(collected):
            if self.out_dirs[k]:
                values = values[::-1]
            if values:
                first = np.asarray(values[0])
                axis = self.out_axes[k] + first.ndim + 1 if self.out_axes[k] < 0 else self.out_axes[k]
                results.append(_stack(values, axis))
            else:
                results.append(np.zeros((0,), dtype=np.float32))
        return (*states, *results)

    def _distances(self, points: Any, rows: Any) -> tuple[Any, Any] | None:
        """The distance body's results for all rows at once: (points, D) with D[t] =
        sum((points - rows[t])^2, axis=1) or sum(|points - rows[t]|, axis=1) [square-rooted],
        as the body computes them one row at a time — the same differences, squares and
        per-row sums (numpy reduces each contiguous row alike), so the same bits — in
        blocks of rows of about a million values; None where the arrays are not 2-D
        float32/float64 of matching width."""
        if not (isinstance(points, np.ndarray) and isinstance(rows, np.ndarray) and points.ndim == 2
                and rows.ndim == 2 and points.dtype == rows.dtype and points.dtype in (np.float32, np.float64)
                and points.shape[1] == rows.shape[1] and rows.shape[0]):
            return None  # (no rows: the loop's own empty result)
        absolute, sqrt = self.distance  # type: ignore[misc]
        steps, n = rows.shape[0], points.shape[0]
        # What the row-by-row loop would have collected by its end (see compute).
        check_bytes(steps * (n * points.itemsize + _ELEMENT_OVERHEAD), output_of(self.info, "scan output 0"))
        out = np.empty((steps, n), points.dtype)
        block = max(1, (1 << 20) // max(1, n * points.shape[1]))
        for start in range(0, steps, block):
            check_terminated(self.info.node_name)
            d = points[None, :, :] - rows[start:start + block, None, :]
            if absolute:
                np.abs(d, out=d)
            else:
                d *= d
            np.add.reduce(d, axis=2, out=out[start:start + block])
        if sqrt:
            np.sqrt(out, out=out)
        return points, out


def _distance_body(body: Any) -> tuple[bool, bool] | None:
    """Whether a Scan body is scikit-learn's pairwise distances as skl2onnx writes them
    (its ``cdist``: nearest neighbours, radius neighbours, ...): state ``s`` passed on by
    an Identity; scan output ``ReduceSumSquare(Sub(s, y))`` or ``ReduceSum(Abs(Sub(s,
    y)))`` of the row ``y`` over axis 1 without keepdims (either Sub order; axes an
    attribute or a constant of the body), optionally square-rooted, through Identities.
    If so (whether the norm is the absolute one, whether it takes the square root); None
    for any other body. onnxruntime runs such a body row by row (~2.5 µs a row)."""
    if len(body.input) != 2 or len(body.output) != 2 or len(body.sparse_initializer):
        return None
    s, y = body.input[0].name, body.input[1].name
    constants = {t.name: t for t in body.initializer}
    producers = {}
    for node in body.node:
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            return None
        producers[node.output[0]] = node

    def through_identities(name: str) -> tuple[str, Any]:
        node = producers.get(name)
        while node is not None and node.op_type == "Identity":
            name = node.input[0]
            node = producers.get(name)
        return name, node

    def over_axis_1(node: Any) -> bool:
        attrs = {a.name: parse_attribute(a) for a in node.attribute}
        if set(attrs) - {"axes", "keepdims"} or attrs.get("keepdims") != 0:
            return False
        if "axes" in attrs:
            return len(node.input) == 1 and attrs["axes"] == [1]
        axes = constants.get(node.input[1]) if len(node.input) == 2 else None
        return axes is not None and tensor_array(axes).tolist() == [1]

    if through_identities(body.output[0].name)[0] != s:
        return None
    _, node = through_identities(body.output[1].name)
    sqrt = node is not None and node.op_type == "Sqrt"
    if sqrt:
        _, node = through_identities(node.input[0])
    if node is None or node.op_type not in ("ReduceSumSquare", "ReduceSum") or not over_axis_1(node):
        return None
    absolute = node.op_type == "ReduceSum"
    _, sub = through_identities(node.input[0])
    if absolute:
        if sub is None or sub.op_type != "Abs":
            return None
        _, sub = through_identities(sub.input[0])
    if sub is None or sub.op_type != "Sub" or sorted(sub.input) != sorted([s, y]) or s == y:
        return None
    return absolute, sqrt


@registry.register("Scan", since=8)
class Scan8(_ControlFlow):
    """Scan-8: like Scan-9 with a leading batch axis and optional sequence lengths."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.body = info.subgraph("body")
        self.n_scan_in = int(info.attr("num_scan_inputs"))
        self.n_state = self.n_explicit - 1 - self.n_scan_in
        self.n_scan_out = len(self.body.output_names) - self.n_state
        self.dirs = list(info.attr("directions", [0] * self.n_scan_in))

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        explicit, outer = self._split(inputs)
        seq_lens = explicit[0]
        states = [np.asarray(s) for s in explicit[1 : 1 + self.n_state]]
        scan_in = [np.asarray(x) for x in explicit[1 + self.n_state :]]
        batch = scan_in[0].shape[0] if scan_in else states[0].shape[0]
        max_len = scan_in[0].shape[1] if scan_in else 0
        final_states: list[list[Any]] = [[] for _ in range(self.n_state)]
        outputs: list[list[Any]] = [[] for _ in range(self.n_scan_out)]
        for b in range(batch):
            length = int(seq_lens[b]) if seq_lens is not None else max_len
            st = [s[b] for s in states]
            per_step: list[list[Any]] = [[] for _ in range(self.n_scan_out)]
            for t in range(length):
                check_terminated(self.info.node_name)
                slices = [x[b, length - 1 - t if d else t] for x, d in zip(scan_in, self.dirs)]
                outs = self.body.run([*st, *slices], outer)
                st = list(outs[: self.n_state])
                for k, v in enumerate(outs[self.n_state :]):
                    per_step[k].append(v)
            for k, v in enumerate(st):
                final_states[k].append(v)
            for k, values in enumerate(per_step):
                outputs[k].append(_stack(values))
        return (*[_stack(v) for v in final_states], *[_stack(v) for v in outputs])
