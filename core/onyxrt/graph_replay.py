"""Graph replay: a run's device work captured once as a device graph, then replayed.

A Python runtime pays a host call for every kernel it launches: a batch-1 ResNet-50 on a
GPU is a few hundred CuPy calls, each tens of microseconds of Python and driver work,
for kernels that run in a few microseconds. A provider that can record its work into a
device graph (CUDA graphs: ``GraphCapture``) lets a whole run become one launch. This
module decides whether a plan can be replayed that way and drives it; the provider
supplies the mechanism (:class:`GraphCapture`, from its ``graph_capture()``).

Per feed signature (each input's shape, dtype and whether it is on the device):

1. the first run is a plain run (it compiles kernels and fills the memory arena);
2. the second run is captured: the feeds are uploaded into buffers the graph keeps, the
   plan's steps run once with the provider recording its work, and the graph is
   launched to compute that run;
3. later runs copy the feeds into those buffers and launch the graph: one host call for
   the device work, plus one copy per feed and per output.

A plan qualifies when every step is the capturing provider's kernel, an upload of a feed
to it, or host work that depends on nothing but constants and shapes (``Shape``,
``Size`` and arithmetic on their results): such host values are the same on every run
with one signature, so they are computed during the capture and never again, and their
uploads are made outside the recorded work. Anything else — a copy back to the host, a
kernel of another device, host work on a feed's data — makes the plan ineligible, said
once as a warning; a capture that fails (a kernel that reads back on the host, a
data-dependent shape) is said once per signature and that signature runs plainly from
then on. Runs with profiling, ``ORT_PARALLEL`` or a run that finds a capture or replay
under way in another thread run plainly, as the same results come either way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

if TYPE_CHECKING:
    from .plan import ExecutionPlan
    from .protocol import ExecutionProvider

__all__ = ["GraphCapture", "GraphReplay", "plan_graph_replay", "replay_allowed", "SHAPE_ONLY_OPS", "MAX_SIGNATURES"]

_T = TypeVar("_T")

#: Host operators that read only their input's shape: their results are fixed by the
#: feed signature whatever the data.
SHAPE_ONLY_OPS = frozenset({"Shape", "Size"})
#: Feed signatures captured at most per session (each holds its graph and its memory);
#: later signatures run plainly.
MAX_SIGNATURES = 16
#: Plain runs of a signature before it is captured (kernels compile, the arena fills).
WARMUP_RUNS = 1


class GraphCapture(Protocol):
    """What a provider offers to record its work into a device graph and replay it
    (``ExecutionProvider.graph_capture()``; see onyxrt_gpu.graphs for CUDA's)."""

    def scope(self) -> AbstractContextManager[Any]:
        """A context in which uploads, the capture and launches run on the provider's
        capture stream, ordered after the caller's earlier work, with the caller's later
        work ordered after them."""
        ...

    def begin(self) -> None:
        """Start recording the provider's work on this thread (inside :meth:`scope`)."""
        ...

    def end(self) -> Any:
        """Stop recording; the graph (launchable with :meth:`launch`). Raises when the
        capture failed."""
        ...

    def abort(self) -> None:
        """Stop a capture that failed, discarding what was recorded."""
        ...

    def stage(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` (an upload of a host value) outside the recording, completed on
        return, into memory the recorded work may read on every launch."""
        ...

    def launch(self, graph: Any) -> None:
        """Replay ``graph``."""
        ...

    def upload_into(self, value: Any, target: Any) -> None:
        """Copy ``value`` (a host array or a device array of this provider) into the
        device array ``target``, ordered before the next launch."""
        ...

    def copy(self, value: Any) -> Any:
        """A new device array with ``value``'s contents, ordered after the last launch."""
        ...


class _Entry:
    """One feed signature: its plain runs so far, then its graph (or why it has none)."""

    __slots__ = ("runs", "graph", "failed", "feeds", "outputs", "keep")

    def __init__(self) -> None:
        self.runs = 0
        self.graph: Any = None
        self.failed = ""
        #: feed name -> the device buffer the graph reads it from
        self.feeds: dict[str, Any] = {}
        #: output slot -> its value after a launch (device arrays the graph writes, or
        #: host values fixed by the signature)
        self.outputs: dict[int, Any] = {}
        #: staged uploads the graph reads: alive as long as the graph
        self.keep: list[Any] = []


class GraphReplay:
    """Capture and replay of one plan on one provider (see the module's docstring)."""

    def __init__(
        self, plan: ExecutionPlan, provider: ExecutionProvider, capture: GraphCapture,
        feed_copies: dict[int, str], staged: frozenset[int], host_outputs: frozenset[int],
        warn: Callable[[str], None],
    ) -> None:
        self.plan = plan
        self.provider = provider
        self.capture = capture
        self.feed_copies = feed_copies  # step index -> feed name it uploads
        self.staged = staged  # step indices of uploads of signature-fixed host values
        self.host_outputs = host_outputs  # output slots holding signature-fixed host values
        self.warn = warn
        self._entries: dict[tuple[Any, ...], _Entry] = {}
        # One capture or replay at a time: they share the provider's capture stream and the
        # graphs' input buffers. A run that finds it taken runs plainly.
        self._busy = threading.Lock()
        #: runs replayed, captures made, captures failed (for tests and reports)
        self.replays = 0
        self.captures = 0
        self.failures = 0

    def release(self) -> None:
        """Drop every captured graph and its memory (``release_captured_graph``); later
        runs warm up and capture again."""
        with self._busy:
            self._entries = {}

    # -- the run -------------------------------------------------------------------------
    def run(
        self, vals: list[Any], feeds: Mapping[str, Any],
        device_feeds: Mapping[str, tuple[Any, ExecutionProvider]],
        keep_on_device: Mapping[str, bool] | None,
    ) -> bool:
        """Fill ``vals``' output slots from a replay (capturing first when due); ``False``:
        the run should go the plain way (``vals`` untouched)."""
        signature = self._signature(feeds, device_feeds)
        if signature is None:
            return False
        if not self._busy.acquire(blocking=False):
            return False
        try:
            entry = self._entries.get(signature)
            if entry is None:
                if len(self._entries) >= MAX_SIGNATURES:
                    return False
                entry = self._entries[signature] = _Entry()
            if entry.failed:
                return False
            if entry.graph is None:
                entry.runs += 1
                if entry.runs <= WARMUP_RUNS:
                    return False
            # One scope for the uploads (or the capture), the launch and the outputs' copies.
            with self.capture.scope():
                if entry.graph is None:
                    if not self._capture(entry, feeds, device_feeds):
                        return False
                else:
                    self._upload(entry, feeds, device_feeds)
                self._launch(entry, vals, keep_on_device)
            return True
        finally:
            self._busy.release()

    def _signature(
        self, feeds: Mapping[str, Any], device_feeds: Mapping[str, tuple[Any, ExecutionProvider]],
    ) -> tuple[Any, ...] | None:
        parts: list[Any] = []
        for name, value in feeds.items():
            shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
            if shape is None or dtype is None:
                return None  # sequences, maps, strings: plain runs
            parts.append((name, tuple(shape), str(dtype), False))
        space = self.provider.device.memory_space
        for name, (value, holder) in device_feeds.items():
            if holder.device.memory_space != space:  # another device's memory: plain runs
                return None
            shape, dtype = holder.describe(value)
            parts.append((name, shape, str(dtype), True))
        parts.sort()
        return tuple(parts)

    # -- capture -------------------------------------------------------------------------
    def _capture(
        self, entry: _Entry, feeds: Mapping[str, Any],
        device_feeds: Mapping[str, tuple[Any, ExecutionProvider]],
    ) -> bool:
        plan = self.plan
        vals = list(plan.template)
        for name, value in feeds.items():
            vals[plan.input_slots[name]] = value
        for name, (value, _) in device_feeds.items():
            vals[plan.input_slots[name]] = value  # only Shape/Size read it there (see _qualify)
        keep = {slot for slot, _ in plan.output_slots.values()}
        capture = self.capture
        step = None
        for index, name in self.feed_copies.items():
            s = plan.steps[index]
            if name in device_feeds:
                buffer = capture.copy(device_feeds[name][0])
            else:
                buffer = s.fn(vals[s.ins[0]])[0]
            vals[s.outs[0]] = entry.feeds[name] = buffer
        capture.begin()
        try:
            for index, step in enumerate(plan.steps):
                if index in self.feed_copies:
                    continue
                args = [vals[j] for j in step.ins]
                if index in self.staged:
                    fn = step.fn
                    results = capture.stage(lambda: fn(*args))  # noqa: B023 - called at once
                    entry.keep.append(results)
                else:
                    results = step.fn(*args)
                for j, v in zip(step.outs, results):
                    vals[j] = v
                for j in step.release:
                    if j not in keep:
                        vals[j] = None
            step = None  # a failure from here on is the capture's, not a node's
            entry.graph = capture.end()
        except BaseException as exc:
            capture.abort()
            entry.feeds.clear()
            entry.keep.clear()
            if not isinstance(exc, Exception):
                raise
            where = f"node {step.name!r} ({step.op_type})" if step is not None else "the capture"
            entry.failed = f"{where}: {type(exc).__name__}: {exc}"
            self.failures += 1
            self.warn(f"{self.provider.name}: this input signature runs without graph replay: "
                      f"{entry.failed}")
            return False
        entry.outputs = {slot: vals[slot] for slot, _ in plan.output_slots.values()}
        self.captures += 1
        return True

    # -- replay --------------------------------------------------------------------------
    def _upload(
        self, entry: _Entry, feeds: Mapping[str, Any],
        device_feeds: Mapping[str, tuple[Any, ExecutionProvider]],
    ) -> None:
        for name, buffer in entry.feeds.items():
            if name in device_feeds:
                self.capture.upload_into(device_feeds[name][0], buffer)
            elif name in feeds:
                self.capture.upload_into(feeds[name], buffer)
            # else: an input with a default (an initializer) that this signature does not
            # feed: its buffer holds the default since the capture.

    def _launch(self, entry: _Entry, vals: list[Any], keep_on_device: Mapping[str, bool] | None) -> None:
        self.capture.launch(entry.graph)
        self.replays += 1
        for name, (slot, _) in self.plan.output_slots.items():
            value = entry.outputs[slot]
            if slot in self.host_outputs:
                value = np.array(value, copy=True)
            elif keep_on_device and keep_on_device.get(name):
                # The graph writes this buffer again on the next launch: hand out a copy.
                value = self.capture.copy(value)
            vals[slot] = value


def replay_allowed(run_options: Any) -> bool:
    """Whether a run with ``run_options`` may be replayed: not when it is to terminate, nor
    with onnxruntime's run config entry ``gpu_graph_id`` = ``-1`` ("no CUDA graph for this
    run"; other ids name graphs in onnxruntime, whereas onyxrt keys them by input shapes)."""
    if run_options is None:
        return True
    if run_options.terminate:
        return False
    try:
        return str(run_options.get_run_config_entry("gpu_graph_id")).strip() != "-1"
    except Exception:  # never set (onnxruntime's getter raises too)
        return True


def plan_graph_replay(plan: ExecutionPlan, warn: Callable[[str], None]) -> GraphReplay | None:
    """The plan's :class:`GraphReplay`, when a provider it uses offers graph capture (its
    option is on) and the plan qualifies; ``None`` otherwise (said with ``warn`` when a
    provider offered capture but the plan does not qualify)."""
    offered = []
    for index, provider in enumerate(plan.providers):
        if provider in plan.used_providers and not provider.device.is_host:
            capture = provider.graph_capture()
            if capture is not None:
                offered.append((index, provider, capture))
    if not offered:
        return None
    index, provider, capture = offered[0]
    found = _qualify(plan, index)
    if isinstance(found, str):
        warn(f"{provider.name}: graph capture is on but this model runs without it: {found}")
        return None
    feed_copies, staged, host_outputs = found
    return GraphReplay(plan, provider, capture, feed_copies, staged, host_outputs, warn)


def _qualify(plan: ExecutionPlan, pi: int) -> tuple[dict[int, str], frozenset[int], frozenset[int]] | str:
    """(feed uploads by step, staged uploads, host output slots) when the plan's steps
    can be captured on provider ``pi``; else why not."""
    providers: Sequence[ExecutionProvider] = plan.providers
    feed_of_slot = {slot: name for name, slot in plan.input_slots.items()}
    # Constants (initializers, weights already on the device) and slot 0, an absent
    # optional input; an input's default is not: a run may feed it.
    fixed = {0} | {slot for slot, value in enumerate(plan.template) if value is not None and slot not in feed_of_slot}
    device_slots: set[int] = set()
    feed_copies: dict[int, str] = {}
    staged: set[int] = set()
    uploaded: set[str] = set()
    for index, step in enumerate(plan.steps):
        provider = providers[step.provider]
        what = f"{'copy' if step.kind == 'copy' else 'node'} {step.name!r} ({step.op_type}) on {provider.name}"
        if step.kind == "copy":
            src = step.ins[0]
            if step.provider != pi:
                return f"{what} copies a value back to the host on every run"
            if src in feed_of_slot:
                name = feed_of_slot[src]
                if name in uploaded:
                    return f"{what}: the input {name!r} is uploaded twice"
                uploaded.add(name)
                feed_copies[index] = name
            elif src in fixed:
                staged.add(index)
            else:
                return f"{what} copies a value computed on the host from the inputs' data"
            device_slots.update(step.outs)
        elif step.provider == pi:
            for j in step.ins:
                if j not in device_slots and j not in fixed:
                    source = f"the input {feed_of_slot[j]!r}" if j in feed_of_slot else f"{plan.slot_names[j]!r}"
                    return f"{what} reads {source} on the host"
            device_slots.update(step.outs)
        elif provider.device.is_host:
            if step.op_type in SHAPE_ONLY_OPS or all(j in fixed for j in step.ins):
                fixed.update(step.outs)
            else:
                return f"{what} computes on the host from the inputs' data"
        else:
            return f"{what}: a second device"
    host_outputs = set()
    for name, (slot, _) in plan.output_slots.items():
        if slot in device_slots:
            continue
        if slot in fixed and slot not in feed_of_slot:
            host_outputs.add(slot)
            continue
        return f"the output {name!r} is not computed on the device"
    return feed_copies, frozenset(staged), frozenset(host_outputs)
