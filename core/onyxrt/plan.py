"""The execution plan: built once per session, run many times.

At creation every unit of the partition gets its kernel (attributes parsed, constant
inputs prepacked) and every value a *slot* — one per (value, memory space), so a value
copied to a device has its own slot there. Copies are steps like any other. A run is a
loop over steps reading and writing a list of slots; each slot is cleared after its last
reader so intermediates are freed as early as possible.
"""

from __future__ import annotations

import bisect
import logging
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import field
from typing import Any

import numpy as np
import onnx

try:  # [first byte, one past the last byte] of an array's elements
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # numpy < 2
    from numpy import byte_bounds  # type: ignore[attr-defined,no-redef]

from .devices import HOST_MEMORY, Device
from .discovery import provider_label
from .errors import (
    InvalidGraph,
    KernelError,
    NotImplementedOp,
    OnyxError,
    ProviderError,
    RunTerminated,
)
from .float_errors import ignore_float_errors, restore_float_errors
from .graph import Graph, Node
from .graph_replay import SHAPE_ONLY_OPS, GraphReplay, replay_allowed
from .kernels import Kernel, KernelInfo, SubgraphRunner, schema_since_version
from .limits import current_limits, memory_error
from .parallel import StepGraph, run_parallel
from .partitioner import Partition, Partitioner
from .placement import CopyRecord, FusedGroupRecord, NodePlacement, PlacementReport
from .protocol import DataTransfer, ExecutionProvider
from .records import record
from .straight_line import Failure, straight_line_runner

__all__ = ["Step", "ExecutionPlan", "PlanSubgraphRunner", "build_plan", "call_provider_hook"]

logger = logging.getLogger("onyxrt.plan")

#: Slot 0 always holds None: absent optional inputs read it.
_NONE_SLOT = 0


@record(eq=False)
class Step:
    """One scheduled call: a node's kernel, a fused group's kernel, or a copy."""

    fn: Callable[..., Sequence[Any]]
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    release: tuple[int, ...]
    provider: int
    name: str
    op_type: str
    kind: str  # "node" | "fused" | "copy"
    kernel: Kernel | None = None
    node_index: int = -1


@record
class _Profile:
    """Per-step timing collected when profiling is on (consumed by the profiler)."""

    events: list[tuple[int, float, float, list[Any], list[Any]]] = field(default_factory=list)


class ExecutionPlan:
    """Steps over slots for one graph; thread-safe to run concurrently (state is local).

    Built by :func:`build_plan`.
    """

    def __init__(self, graph: Graph, providers: Sequence[ExecutionProvider]) -> None:
        self.graph = graph
        self.providers = list(providers)
        self.steps: list[Step] = []
        self.template: list[Any] = [None]
        self.slot_names: list[str] = [""]
        self.slots: dict[tuple[str, str], int] = {}
        self.input_slots: dict[str, int] = {}
        #: graph output name → (slot, provider index owning that slot's memory space)
        self.output_slots: dict[str, tuple[int, int]] = {}
        self.copies: list[CopyRecord] = []
        self.placement: PlacementReport | None = None
        self.used_providers: list[ExecutionProvider] = []
        #: the used providers that define on_run_start/on_run_end (the rest are skipped)
        self.hooked_providers: list[ExecutionProvider] = []
        self.space_owner: dict[str, int] = {}
        self.protected: set[int] = set()  # slots holding initializers or feeds
        self._fed_slots: list[int] = []  # the protected slots that are not constant initializers
        self._initializer_extent_cache: _Extents | None = None
        self.initializer_slots: set[int] = set()  # slots holding constant initializers
        self.kept_slots: set[int] = set()  # never released during a run (outputs, constants)
        #: inputs whose host slot a non-copy step reads (a device feed must come to the host)
        self.host_read_inputs: set[str] = set()
        self.step_graph: StepGraph = StepGraph.of([])
        #: graph output name → (slot, owner, whether the owner is the host): run's view
        self._outputs: dict[str, tuple[int, int, bool]] = {}
        self._compiled: list[tuple[Callable[..., Sequence[Any]], Callable[[list[Any]], Any], bool, tuple[int, ...], tuple[int, ...]]] = []
        #: the steps as one straight-line function (small plans; see straight_line.py)
        self._straight: Callable[[list[Any]], Failure] | None = None
        #: runs captured as a device graph and replayed (graph_replay.py), when a
        #: provider offers it and the plan qualifies; set by the session
        self.graph_replay: GraphReplay | None = None

    # -- running ---------------------------------------------------------------------
    def run(
        self,
        feeds: Mapping[str, Any],
        output_names: Sequence[str],
        run_options: Any = None,
        profile: _Profile | None = None,
        keep_on_device: Mapping[str, bool] | None = None,
        pool: ThreadPoolExecutor | None = None,
        device_feeds: Mapping[str, tuple[Any, ExecutionProvider]] | None = None,
    ) -> list[Any]:
        """Execute the plan; ``feeds`` are host values keyed by input name.

        ``device_feeds`` are inputs already in a device's memory (value, owning provider):
        they are used where they live, and copied only where the plan needs them
        elsewhere. Outputs come back on the host unless ``keep_on_device[name]`` is true,
        in which case they are returned where their producer left them. With a ``pool``
        independent steps run concurrently (``ORT_PARALLEL``).
        """
        vals = list(self.template)
        input_slots = self.input_slots
        for name, value in feeds.items():
            vals[input_slots[name]] = value
        if (device_feeds is None and pool is None and profile is None and self.graph_replay is None
                and not self.hooked_providers):
            # The usual run (host feeds, no provider hooks, no replay, not parallel or
            # profiled) without the branches below: ~0.4 µs of a tiny model's ~5 µs run.
            self._execute_quietly(vals, run_options)
            return self._outputs_of(vals, feeds, output_names, keep_on_device)
        for name, (value, holder) in (device_feeds or {}).items():
            if name in self.host_read_inputs:  # a host kernel reads it: it must be on the host
                vals[input_slots[name]] = holder.data_transfer().copy(value, holder.device, _HOST_DEVICE)
            else:
                vals[input_slots[name]] = _Resident(value, holder)
        started: list[ExecutionProvider] = []
        try:
            for p in self.hooked_providers:
                call_provider_hook(p, "on_run_start", run_options)
                started.append(p)
            # Floating-point overflow and invalid values are results (inf, nan), as in
            # onnxruntime, not warnings; one context per run keeps kernels free of it.
            quiet = ignore_float_errors()
            try:
                if self.graph_replay is not None and pool is None and profile is None and \
                        replay_allowed(run_options) and \
                        self.graph_replay.run(vals, feeds, device_feeds or {}, keep_on_device):
                    pass  # the outputs' slots hold the replay's results
                elif pool is not None and profile is None:
                    run_parallel(
                        self.step_graph, vals,
                        lambda i, args: self._call_step(i, args, run_options),
                        lambda i, at_failure, exc: self._kernel_error(self.steps[i], at_failure, exc),
                        self.kept_slots, pool,
                    )
                elif profile is None:
                    self._execute(vals, run_options)
                else:
                    self._execute_profiled(vals, run_options, profile)
            finally:
                restore_float_errors(quiet)
        except BaseException:
            _end_run(started, run_options, failed=True)
            raise
        _end_run(started, run_options, failed=False)
        return self._outputs_of(vals, feeds, output_names, keep_on_device)

    def _execute_quietly(self, vals: list[Any], run_options: Any) -> None:
        """:meth:`_execute` with floating-point errors ignored, as every run executes
        (overflow and invalid values are results, as in onnxruntime)."""
        quiet = ignore_float_errors()
        try:
            self._execute(vals, run_options)
        finally:
            restore_float_errors(quiet)

    def host_only(self) -> bool:
        """Whether a run is :meth:`run`'s usual one with every output on the host (no
        provider hooks, graph replay or device outputs)."""
        return (self.graph_replay is None and not self.hooked_providers
                and all(on_host for _, _, on_host in self._outputs.values()))

    def _outputs_of(
        self, vals: list[Any], feeds: Mapping[str, Any], output_names: Sequence[str],
        keep_on_device: Mapping[str, bool] | None,
    ) -> list[Any]:
        """A finished run's outputs, as the caller gets them (see :meth:`run`)."""
        results: list[Any] = []
        # A kernel may hand back an input itself (Identity, a no-op Reshape or Cast): the
        # caller's feed must never come back as an output, nor one array as two outputs
        # (writing to one would change the other), as onnxruntime returns copies.
        fed: set[int] | None = None
        protected = self.protected
        extents: _Extents | None = None
        handed: set[int] = set()
        for name in output_names:
            slot, owner, on_host = self._outputs[name]
            value = vals[slot]
            provider = self.providers[owner]
            if type(value) is _Resident:  # an input passed straight through to an output
                value, provider = value.value, value.owner
                on_host = provider.device.is_host
            if not on_host and not (keep_on_device and keep_on_device.get(name)):
                value = _output_to_host(name, value, provider)
            elif isinstance(value, np.generic):
                # A kernel that indexed down to one element (Gather of a scalar index)
                # holds a numpy scalar; callers get an ndarray, as from onnxruntime.
                value = np.asarray(value)
            elif isinstance(value, np.ndarray):
                flags = value.flags
                if slot in protected or not flags.writeable:
                    # Never hand out an initializer, a feed or a kernel's cached constant
                    # itself: the caller may mutate what it gets.
                    value = value.copy()
                else:
                    if fed is None:
                        fed = {id(v) for v in feeds.values()}
                    if id(value) in fed:
                        value = value.copy()  # a feed itself (Identity of an input)
                    elif not flags.owndata:
                        if extents is None:
                            extents = _Extents([vals[s] for s in self._fed_slots])
                        if extents.overlaps(value) or self._initializer_extents().overlaps(value):
                            value = value.copy()
                if id(value) in handed:
                    value = value.copy()
            handed.add(id(value))  # the arrays stay alive in results: their ids stay theirs
            results.append(value)
        return results

    def _initializer_extents(self) -> _Extents:
        """The memory extents of the constant initializers' values, sorted once per plan (a
        GPT-2 export's views among its outputs made every run measure ~1100 arrays)."""
        if self._initializer_extent_cache is None:
            self._initializer_extent_cache = _Extents([self.template[s] for s in self.initializer_slots])
        return self._initializer_extent_cache

    def finalize(self) -> None:
        """Freeze the steps into the tuples the run loop reads (call after building).

        Each tuple holds the kernel's compute, an ``itemgetter`` fetching its inputs
        from the slot list (a single value for one input, a tuple otherwise), whether it
        takes exactly one input, its output slots and the slots it releases.
        """
        compiled = []
        for s in self.steps:
            if len(s.ins) == 0:
                get: Callable[[list[Any]], Any] = _no_inputs
            else:
                get = operator.itemgetter(*s.ins)
            compiled.append((s.fn, get, len(s.ins) == 1, s.outs, s.release))
        self._compiled = compiled
        #: (compute, input slots, output slots, released slots, single_output or None) per
        #: step: what the straight-line runner and a compiled run path call
        self.step_specs = [(s.fn, s.ins, s.outs, s.release, _single_output(s)) for s in self.steps]
        self._straight = straight_line_runner(self.step_specs)
        self._outputs = {
            name: (slot, owner, self.providers[owner].device.is_host)
            for name, (slot, owner) in self.output_slots.items()
        }
        self.hooked_providers = [p for p in self.used_providers if _has_run_hooks(p)]
        # the protected slots a run fills (feeds; overridable initializers): their extents
        # are taken per run, the constant initializers' once (_initializer_extents)
        self._fed_slots = sorted(self.protected - self.initializer_slots)
        self._initializer_extent_cache = None
        self.step_graph = StepGraph.of(self.steps)
        host_slots = {slot: name for name, slot in self.input_slots.items()}
        self.host_read_inputs = {
            host_slots[j] for s in self.steps if s.kind != "copy" for j in s.ins if j in host_slots
        } | {name for name, (slot, _) in self.output_slots.items() if slot in host_slots}

    def fast_run_allowed(self) -> bool:
        """Whether a compiled run path (:mod:`onyxrt.fast_run`) may run this plan: every
        provider on the host and without run hooks, every output on the host, no graph
        replay."""
        return (self.graph_replay is None and not self.hooked_providers
                and all(p.device.is_host for p in self.used_providers)
                and all(on_host for _, _, on_host in self._outputs.values()))

    def _execute(self, vals: list[Any], run_options: Any) -> None:
        # The hot loop: plain tuples and local names keep per-node overhead to about a
        # microsecond; everything else (names, providers) is looked up only on error.
        if run_options is None and self._straight is not None:
            failure = self._straight(vals)
            if failure is None:
                return
            i, results, exc = failure
            del failure
            try:
                if i < 0:
                    step = self.steps[~i]
                    raise _too_few(step, results, self.providers[step.provider].name) from None
                if isinstance(exc, OnyxError) or not isinstance(exc, Exception):
                    raise exc  # onyxrt's own errors and interrupts pass as they are
                raise self._kernel_error(self.steps[i], vals, exc) from exc
            finally:
                del exc, results  # no cycle through this frame (see straight_line.py)
        i = -1
        steps: Iterable[Any] = self._compiled
        if run_options is not None:  # the terminate check costs per node only when asked for
            steps = _until_terminated(self._compiled, self.steps, run_options)
        try:
            for i, (fn, get, one_input, outs, release) in enumerate(steps):
                results = fn(get(vals)) if one_input else fn(*get(vals))
                try:
                    count = len(results)
                except TypeError:
                    count = -1
                if count < len(outs):
                    raise _too_few(self.steps[i], results, self.providers[self.steps[i].provider].name)
                for j, v in zip(outs, results):
                    vals[j] = v
                for j in release:
                    vals[j] = None
        except OnyxError:
            raise
        except Exception as exc:
            raise self._kernel_error(self.steps[i], vals, exc) from exc

    def _execute_profiled(self, vals: list[Any], run_options: Any, profile: _Profile) -> None:
        perf = time.perf_counter
        step = None
        try:
            for si, step in enumerate(self.steps):
                if run_options is not None and run_options.terminate:
                    raise RunTerminated(
                        f"run terminated by RunOptions.terminate before node {step.name!r}"
                    )
                args = [vals[j] for j in step.ins]
                t0 = perf()
                outs = step.fn(*args)
                t1 = perf()
                if _count(outs) < len(step.outs):
                    raise _too_few(step, outs, self.providers[step.provider].name)
                profile.events.append((si, t0, t1, args, list(outs)))
                for j, v in zip(step.outs, outs):
                    vals[j] = v
                for j in step.release:
                    vals[j] = None
        except OnyxError:
            raise
        except Exception as exc:
            assert step is not None
            raise self._kernel_error(step, vals, exc) from exc

    def _call_step(self, i: int, args: list[Any], run_options: Any) -> Sequence[Any]:
        """Step ``i``'s results on its input values ``args``, checked to be enough
        (the parallel runner's unit of work; the sequential loops inline it)."""
        step = self.steps[i]
        if run_options is not None and run_options.terminate:
            raise RunTerminated(f"run terminated by RunOptions.terminate before node {step.name!r}")
        results = step.fn(*args)
        if _count(results) < len(step.outs):
            raise _too_few(step, results, self.providers[step.provider].name)
        return results

    def _kernel_error(self, step: Step, vals: list[Any], exc: BaseException) -> OnyxError:
        provider = provider_label(self.providers[step.provider].name)
        if isinstance(exc, MemoryError):  # the memory guard refused, or the system had none
            return memory_error(f"node {step.name!r} ({step.op_type}) on {provider}", exc)
        described = []
        for j in step.ins:
            v = vals[j]
            name = self.slot_names[j] or "(absent)"
            if isinstance(v, np.ndarray):
                described.append(f"{name}: {v.dtype}{list(v.shape)}")
            elif v is None:
                described.append(f"{name}: None")
            else:
                described.append(f"{name}: {type(v).__name__}")
        return KernelError(
            f"node {step.name!r} ({step.op_type}) on {provider} failed: "
            f"{type(exc).__name__}: {exc}. Inputs: {', '.join(described) or 'none'}"
        )


_HOST_DEVICE = Device("cpu", "host")


class _Resident:
    """A device-resident feed standing in its input's host slot; copy steps use it where
    it lives instead of copying (see ``ExecutionPlan.run``'s ``device_feeds``)."""

    __slots__ = ("value", "owner")

    def __init__(self, value: Any, owner: ExecutionProvider) -> None:
        self.value = value
        self.owner = owner


class _Extents:
    """The memory extents of the arrays a run must not hand out (initializers, feeds),
    to ask whether an output view overlaps one of them: the bounds test of
    ``np.may_share_memory``, with the extents sorted once, so a run with many view
    outputs over many initializers (a constant-folding evaluation: hundreds of each)
    costs O(n log n) instead of a may_share_memory call per pair."""

    __slots__ = ("_starts", "_reach")

    def __init__(self, arrays: Iterable[Any]) -> None:
        bounds = sorted(byte_bounds(a) for a in arrays if isinstance(a, np.ndarray) and a.size)
        self._starts = [lo for lo, _ in bounds]
        # _reach[i]: the furthest end among the first i + 1 extents.
        self._reach: list[int] = []
        furthest = 0
        for _, hi in bounds:
            furthest = max(furthest, hi)
            self._reach.append(furthest)

    def overlaps(self, value: np.ndarray) -> bool:
        """Whether ``value``'s bytes may overlap one of the extents."""
        if not value.size:
            return False
        lo, hi = byte_bounds(value)
        before = bisect.bisect_left(self._starts, hi)  # extents starting below value's end
        return before > 0 and self._reach[before - 1] > lo


def _no_inputs(vals: list[Any]) -> tuple[()]:
    return ()


def _until_terminated(compiled: list[Any], steps: list[Any], run_options: Any) -> Iterator[Any]:
    """The compiled steps, stopping with RunTerminated once ``run_options.terminate`` is set."""
    for i, step in enumerate(compiled):
        if run_options.terminate:
            raise RunTerminated(f"run terminated by RunOptions.terminate before node {steps[i].name!r}")
        yield step


def _count(results: Any) -> int:
    """How many values a kernel returned (-1: not a sequence)."""
    try:
        return len(results)
    except TypeError:
        return -1


def _too_few(step: Step, results: Any, provider: str) -> ProviderError:
    """The error for a kernel returning too few values (or not a sequence). Extra trailing
    values are allowed: kernels return optional outputs the node leaves out."""
    what = "fused group" if step.kind == "fused" else "node"
    n = _count(results)
    got = f"{n} value(s)" if n >= 0 else type(results).__name__
    return ProviderError(
        f"the kernel of {what} {step.name!r} ({step.op_type}) on {provider_label(provider)} "
        f"returned {got} but it has {len(step.outs)} output(s); compute must return a tuple "
        "with one value per output, in order. This is a bug in the provider's package: "
        "report it there, or leave the provider out of the session's providers list",
        provider,
    )


def _single_output(step: Step) -> Callable[..., Any] | None:
    """The step's kernel's :attr:`~onyxrt.kernels.Kernel.single_output`, while the step
    still calls that kernel's ``compute`` (not a wrapper put in its place); the runner
    takes it only for a step of one output."""
    kernel = step.kernel
    single = getattr(kernel, "single_output", None)
    if single is None or step.fn != kernel.compute:  # type: ignore[union-attr]
        return None
    return single


def _has_run_hooks(provider: ExecutionProvider) -> bool:
    """Whether ``provider`` defines its own ``on_run_start`` or ``on_run_end`` (on its class
    or the instance): the protocol's defaults do nothing, and a tiny model's run should
    not pay two calls per provider for nothing."""
    return any(
        hook in getattr(provider, "__dict__", ()) or getattr(type(provider), hook, None) is not getattr(ExecutionProvider, hook)
        for hook in ("on_run_start", "on_run_end")
    )


def call_provider_hook(provider: ExecutionProvider, hook: str, *args: Any) -> None:
    """``provider.hook(*args)``; a failure other than an onyxrt error becomes a
    :class:`ProviderError` naming the provider, its package and the hook."""
    try:
        getattr(provider, hook)(*args)
    except OnyxError:
        raise
    except Exception as exc:
        raise ProviderError(
            f"{provider_label(provider.name)}.{hook} failed: {type(exc).__name__}: {exc}",
            provider.name,
        ) from exc


def _end_run(started: Sequence[ExecutionProvider], run_options: Any, failed: bool) -> None:
    """``on_run_end`` for every provider whose ``on_run_start`` ran, even if one fails;
    after a failed run the run's own error is the one the caller sees."""
    first: BaseException | None = None
    for p in started:
        try:
            call_provider_hook(p, "on_run_end", run_options)
        except ProviderError as exc:
            if failed:
                logger.warning("after a failed run: %s", exc)
            elif first is None:
                first = exc
    if first is not None:
        try:
            raise first
        finally:
            first = None  # no cycle through this frame: the run's buffers free at once


def _output_to_host(name: str, value: Any, provider: ExecutionProvider) -> Any:
    try:
        return provider.data_transfer().copy(value, provider.device, _HOST_DEVICE)
    except OnyxError:
        raise
    except Exception as exc:
        raise ProviderError(
            f"copying output {name!r} from {provider.device} to the host failed in "
            f"{provider_label(provider.name)}'s data transfer: {type(exc).__name__}: {exc}",
            provider.name,
        ) from exc


class PlanSubgraphRunner(SubgraphRunner):
    """Runs a control-flow body through its own plan (same providers as the parent)."""

    def __init__(self, plan: ExecutionPlan) -> None:
        self.plan = plan
        self.input_names = tuple(plan.graph.inputs)
        self.output_names = tuple(plan.graph.outputs)
        self.outer_names = tuple(plan.graph.outer_names)
        #: Whether the body's runs take :meth:`_run_on_host` (decided at the first run).
        self._host_only: bool | None = None
        #: (input slots, (outer slot, name) pairs, output slots), read at the first run.
        self._slots: tuple[tuple[int, ...], tuple[tuple[int, str], ...], tuple[int, ...]] | None = None

    def run(self, inputs: Sequence[Any], outer: Mapping[str, Any]) -> list[Any]:
        """Execute the body once with formal ``inputs`` and outer-scope values."""
        plan = self.plan
        # The run's RunOptions (from the session's run context): a long body stops at its
        # next step when ``terminate`` is set, not only between iterations.
        run_options = current_limits().run_options
        if self._host_only is None:
            self._host_only = plan.host_only()
        if self._host_only:
            return self._run_on_host(inputs, outer, run_options)
        feeds = dict(zip(self.input_names, inputs))
        for name in self.outer_names:
            feeds[name] = outer[name]
        return plan.run(feeds, self.output_names, run_options)

    def _run_on_host(self, inputs: Sequence[Any], outer: Mapping[str, Any], run_options: Any) -> list[Any]:
        """:meth:`ExecutionPlan.run`'s usual run, for a body whose values all stay on the
        host: slots filled by position, and outputs handed to the control-flow kernel as
        the steps left them — a body's outputs are the next iteration's inputs or
        collected and stacked, never the caller's, so only initializers (which the kernel
        could hand on to the caller) and numpy scalars are converted. With the Scan's own
        bookkeeping read once per call, a Scan over 400 rows (scikit-learn's nearest
        neighbours, before its distances were vectorized) went from 7.1 to 5.5 ms."""
        plan = self.plan
        slots = self._slots
        if slots is None:
            slots = self._slots = (
                tuple(plan.input_slots[n] for n in self.input_names),
                tuple((plan.input_slots[n], n) for n in self.outer_names),
                tuple(plan._outputs[n][0] for n in self.output_names),
            )
        vals = list(plan.template)
        for slot, value in zip(slots[0], inputs):
            vals[slot] = value
        for slot, name in slots[1]:
            vals[slot] = outer[name]
        plan._execute_quietly(vals, run_options)
        protected = plan.protected
        results = []
        for slot in slots[2]:
            value = vals[slot]
            if isinstance(value, np.generic):
                value = np.asarray(value)
            elif slot in protected and isinstance(value, np.ndarray):
                value = value.copy()
            results.append(value)
        return results


@record
class PlanContext:
    """What building plans (the main graph and control-flow bodies) shares."""

    providers: Sequence[ExecutionProvider]
    partitioner: Partitioner
    opsets: Mapping[str, int]
    requested: tuple[str, ...] = ()
    fallbacks: tuple[Any, ...] = ()
    option_notes: tuple[str, ...] = ()


def build_plan(graph: Graph, ctx: PlanContext) -> ExecutionPlan:
    """Partition ``graph`` and build its plan: kernels, slots, copies, releases."""
    partition = ctx.partitioner.partition(graph)
    builder = _PlanBuilder(graph, partition, ctx)
    return builder.build()


class _PlanBuilder:
    def __init__(self, graph: Graph, partition: Partition, ctx: PlanContext) -> None:
        self.graph = graph
        self.partition = partition
        self.ctx = ctx
        self.plan = ExecutionPlan(graph, ctx.providers)
        self.space_of = [p.device.memory_space for p in ctx.providers]
        for i, space in enumerate(self.space_of):
            self.plan.space_owner.setdefault(space, i)
        # where each value is available: value → {memory space: slot}
        self.where: dict[str, dict[str, int]] = {}
        self.home: dict[str, tuple[str, int]] = {}  # value → (space, owner provider index)
        # Reports of this graph's own control-flow bodies ("node/body" → report).
        self.sub_reports: dict[str, PlacementReport] = {}

    # -- slots -----------------------------------------------------------------------
    def _new_slot(self, name: str, space: str, value: Any = None) -> int:
        slot = len(self.plan.template)
        self.plan.template.append(value)
        self.plan.slot_names.append(name)
        self.plan.slots[(name, space)] = slot
        self.where.setdefault(name, {})[space] = slot
        return slot

    def build(self) -> ExecutionPlan:
        graph, plan = self.graph, self.plan
        host_owner = self.plan.space_owner.get(HOST_MEMORY, len(self.ctx.providers) - 1)
        for name in graph.inputs + graph.overridable + list(graph.outer_names):
            if name in self.where:
                continue
            default = graph.initializers.get(name)
            slot = self._new_slot(name, HOST_MEMORY, default)
            plan.input_slots[name] = slot
            plan.protected.add(slot)
            self.home[name] = (HOST_MEMORY, host_owner)
        for name, value in graph.initializers.items():
            if name not in self.where:
                slot = self._new_slot(name, HOST_MEMORY, value)
                plan.protected.add(slot)
                plan.initializer_slots.add(slot)
                self.home[name] = (HOST_MEMORY, host_owner)

        fused_by_provider: dict[int, list[tuple[int, Any]]] = {}
        for unit in self.partition.units:
            pi = unit.provider
            provider = self.ctx.providers[pi]
            if unit.group is not None:
                group = unit.group
                ins = tuple(self._slot_for(n, pi) for n in group.runtime_inputs)
                outs = tuple(self._output_slot(n, pi) for n in group.outputs)
                step = Step(_unbuilt, ins, outs, (), pi, group.name, "FusedSubgraph", "fused")
                plan.steps.append(step)
                fused_by_provider.setdefault(pi, []).append((len(plan.steps) - 1, group))
            else:
                node = unit.node
                assert node is not None
                kernel = self._create_kernel(node, provider)
                on_host = provider.host_input_indices(node, self.graph) if not provider.device.is_host else frozenset()
                # A host Shape/Size reads only its input's shape: it takes the value where
                # it lives (a device array has .shape) instead of copying it to the host.
                shape_only = provider.device.is_host and node.op_type in SHAPE_ONLY_OPS and node.domain in ("", "ai.onnx")
                ins = tuple(
                    (self._slot_anywhere(n) if shape_only
                     else self._slot_for(n, host_owner if i in on_host else pi)) if n else _NONE_SLOT
                    for i, n in enumerate([*node.inputs, *node.implicit_inputs])
                )
                outs = tuple(self._output_slot(n, pi) if n else self._scratch_slot() for n in node.outputs)
                plan.steps.append(Step(kernel.compute, ins, outs, (), pi, node.name, node.op_type, "node", kernel, node.index))
        for pi, items in fused_by_provider.items():
            self._compile(pi, items)

        for name in graph.outputs:
            if name not in self.where:
                raise InvalidGraph(f"graph output {name!r} is not produced by any node or input")
            space, owner = self.home[name]
            plan.output_slots[name] = (self.where[name][space], owner)
            if space != HOST_MEMORY:
                self.plan.copies.append(self._copy_record(name, space, HOST_MEMORY, owner, host_owner, True))
        self._assign_releases()
        plan.used_providers = [self.ctx.providers[i] for i in sorted({s.provider for s in plan.steps})]
        plan.finalize()
        plan.placement = self._report()
        return plan

    def _scratch_slot(self) -> int:
        return self._new_slot("", "scratch")

    def _output_slot(self, name: str, pi: int) -> int:
        space = self.space_of[pi]
        self.home[name] = (space, pi)
        return self._new_slot(name, space)

    def _slot_anywhere(self, name: str) -> int:
        """A slot holding ``name`` in whichever memory space: the host's if it is there,
        else where it was produced (for kernels that read only metadata)."""
        avail = self.where.get(name)
        if avail is None:
            raise InvalidGraph(f"value {name!r} is used before it is produced")
        if HOST_MEMORY in avail:
            return avail[HOST_MEMORY]
        return avail[self.home[name][0]]

    def _slot_for(self, name: str, pi: int) -> int:
        """The slot holding ``name`` in provider ``pi``'s memory, adding a copy if needed."""
        space = self.space_of[pi]
        avail = self.where.get(name)
        if avail is None:
            raise InvalidGraph(f"value {name!r} is used before it is produced")
        if space in avail:
            return avail[space]
        src_space, src_owner = self.home[name]
        src_slot = avail[src_space]
        constant = self.graph.is_constant(name)
        if constant:
            # Weights move once, at creation, not on every run.
            value = self._copy_constant(name, src_owner, pi, self.plan.template[src_slot])
            slot = self._new_slot(name, space, value)
            self.plan.protected.add(slot)
            self.plan.initializer_slots.add(slot)
            self.plan.copies.append(self._copy_record(name, src_space, space, src_owner, pi, False))
            return slot
        slot = self._new_slot(name, space)
        self.plan.steps.append(
            Step(self._transfer(src_owner, pi), (src_slot,), (slot,), (), pi,
                 f"Memcpy_{name}_{src_space}_to_{space}", "Memcpy", "copy")
        )
        self.plan.copies.append(self._copy_record(name, src_space, space, src_owner, pi, True))
        return slot

    def _copy_constant(self, name: str, src_pi: int, dst_pi: int, value: Any) -> Any:
        providers = self.ctx.providers
        device_side = providers[dst_pi] if not providers[dst_pi].device.is_host else providers[src_pi]
        try:
            return self._transfer(src_pi, dst_pi)(value)[0]
        except OnyxError:
            raise
        except Exception as exc:
            raise ProviderError(
                f"{provider_label(device_side.name)} failed to copy the weight {name!r} from "
                f"{providers[src_pi].device} to {providers[dst_pi].device}: {type(exc).__name__}: {exc}",
                device_side.name,
            ) from exc

    def _transfer(self, src_pi: int, dst_pi: int) -> Callable[[Any], tuple[Any]]:
        providers = self.ctx.providers
        src, dst = providers[src_pi].device, providers[dst_pi].device
        for owner in (dst_pi, src_pi):
            dt = providers[owner].data_transfer()
            if dt.can_copy(src, dst):
                return _copier(dt, src, dst)
        # Neither side copies directly (e.g. GPU ↔ NPU): go through host memory.
        host = _HOST_DEVICE
        to_host = self._find_transfer(src_pi, src, host)
        from_host = self._find_transfer(dst_pi, host, dst)
        if to_host is None or from_host is None:
            raise ProviderError(
                f"no data transfer can move values from {src} ({providers[src_pi].name}) to "
                f"{dst} ({providers[dst_pi].name})",
                providers[dst_pi if not dst.is_host else src_pi].name,
            )

        def via_host(value: Any) -> tuple[Any]:
            return (from_host.copy(to_host.copy(value, src, host), host, dst),)

        return via_host

    def _find_transfer(self, pi: int, src: Device, dst: Device) -> DataTransfer | None:
        dt = self.ctx.providers[pi].data_transfer()
        return dt if dt.can_copy(src, dst) else None

    def _copy_record(self, name: str, src: str, dst: str, src_pi: int, dst_pi: int, per_run: bool) -> CopyRecord:
        vt = self.graph.value_type(name)
        nbytes = None
        if vt is not None and vt.static_size is not None and vt.dtype is not None:
            nbytes = vt.static_size * vt.dtype.itemsize
        if not per_run:
            value = self.graph.initializers.get(name)
            if isinstance(value, np.ndarray):
                nbytes = int(value.nbytes)
        providers = self.ctx.providers
        return CopyRecord(name, src, dst, providers[src_pi].name, providers[dst_pi].name, nbytes, per_run)

    # -- kernels ---------------------------------------------------------------------
    def _kernel_info(self, node: Node, provider: ExecutionProvider) -> KernelInfo:
        graph = self.graph
        opset = graph.opset(node.domain)
        constants = {
            i: graph.initializers[n] for i, n in enumerate(node.inputs) if n and graph.is_constant(n)
        }
        return KernelInfo(
            node_name=node.name,
            op_type=node.op_type,
            domain=node.domain,
            since_version=schema_since_version(node.domain, node.op_type, opset) or opset,
            opset=opset,
            attributes=node.attributes,
            input_names=node.inputs,
            output_names=node.outputs,
            input_types=tuple(graph.value_type(n) if n else None for n in node.inputs),
            output_types=tuple(graph.value_type(n) if n else None for n in node.outputs),
            constant_inputs=constants,
            implicit_inputs=node.implicit_inputs,
            subgraph_builder=self._subgraph_builder(node),
            provider_options=provider.effective_options(),
        )

    def _create_kernel(self, node: Node, provider: ExecutionProvider) -> Kernel:
        info = self._kernel_info(node, provider)
        try:
            return provider.create_kernel(node, info)
        except OnyxError:
            raise
        except NotImplementedError as exc:
            raise NotImplementedOp(f"node {node.name!r} ({node.qualified_op}): {exc}") from exc
        except Exception as exc:
            raise ProviderError(
                f"{provider_label(provider.name)} failed to create the kernel for node {node.name!r} "
                f"({node.qualified_op}): {type(exc).__name__}: {exc}",
                provider.name,
            ) from exc

    def _compile(self, pi: int, items: list[tuple[int, Any]]) -> None:
        provider = self.ctx.providers[pi]
        groups = [g for _, g in items]
        try:
            kernels = list(provider.compile(groups))
        except OnyxError:
            raise
        except Exception as exc:
            raise ProviderError(
                f"{provider_label(provider.name)} failed to compile {len(groups)} fused group(s) "
                f"({', '.join(g.name for g in groups)}): {type(exc).__name__}: {exc}",
                provider.name,
            ) from exc
        if len(kernels) != len(groups):
            raise ProviderError(
                f"{provider_label(provider.name)}: compile returned {len(kernels)} kernels for "
                f"{len(groups)} groups (one per group expected)",
                provider.name,
            )
        for (step_index, _), kernel in zip(items, kernels):
            step = self.plan.steps[step_index]
            step.fn = kernel.compute
            step.kernel = kernel

    def _subgraph_builder(self, node: Node) -> Callable[[onnx.GraphProto], SubgraphRunner]:
        def build(body: onnx.GraphProto) -> SubgraphRunner:
            visible = set(self.where) | set(self.graph.producers) | set(self.graph.outer_names)
            sub = Graph.from_proto(body, self.ctx.opsets, outer_scope=visible)
            plan = build_plan(sub, self.ctx)
            if plan.placement is not None:
                self.sub_reports[f"{node.name}/{body.name or 'body'}"] = plan.placement
            return PlanSubgraphRunner(plan)

        return build

    # -- releases and report -----------------------------------------------------------
    def _assign_releases(self) -> None:
        plan = self.plan
        keep = {slot for slot, _ in plan.output_slots.values()} | plan.protected | {_NONE_SLOT}
        plan.kept_slots = keep
        last_use: dict[int, int] = {}
        for si, step in enumerate(plan.steps):
            for j in (*step.ins, *step.outs):
                last_use[j] = si
        releases: dict[int, list[int]] = {}
        for slot, si in last_use.items():
            if slot not in keep:
                releases.setdefault(si, []).append(slot)
        for si, slots in releases.items():
            plan.steps[si].release = tuple(sorted(slots))

    def _report(self) -> PlacementReport:
        providers = self.ctx.providers
        nodes: list[NodePlacement] = []
        groups: list[FusedGroupRecord] = []
        for unit in self.partition.units:
            pname = providers[unit.provider].name
            if unit.group is not None:
                g = unit.group
                groups.append(FusedGroupRecord(g.name, pname, tuple(n.name for n in g.nodes), g.inputs, g.outputs))
                nodes.extend(NodePlacement(n.name, n.op_type, pname, g.name) for n in g.nodes)
            else:
                assert unit.node is not None
                nodes.append(NodePlacement(unit.node.name, unit.node.op_type, pname))
        return PlacementReport(
            providers_requested=tuple(self.ctx.requested),
            providers_session=tuple(p.name for p in providers),
            nodes=tuple(nodes),
            groups=tuple(groups),
            copies=tuple(self.plan.copies),
            refusals=tuple(self.partition.refusals),
            fallbacks=tuple(self.ctx.fallbacks),
            partitions=self.partition.partitions,
            option_notes=tuple(self.ctx.option_notes),
            subgraphs=dict(self.sub_reports),
        )


def _copier(dt: DataTransfer, src: Device, dst: Device) -> Callable[[Any], tuple[Any]]:
    def copy(value: Any) -> tuple[Any]:
        if type(value) is _Resident:  # a device feed: use it where it lives, or move it from there
            return (_move_resident(value, dt, dst),)
        return (dt.copy(value, src, dst),)

    return copy


def _move_resident(resident: _Resident, to_dst: DataTransfer, dst: Device) -> Any:
    """A device feed where ``dst`` needs it: as it is when it already lives there, else
    copied directly by its owner, else through the host (``to_dst`` copies host → dst)."""
    owner = resident.owner
    if owner.device.memory_space == dst.memory_space:
        return resident.value
    transfer = owner.data_transfer()
    if transfer.can_copy(owner.device, dst):
        return transfer.copy(resident.value, owner.device, dst)
    host = transfer.copy(resident.value, owner.device, _HOST_DEVICE)
    return to_dst.copy(host, _HOST_DEVICE, dst)


def _unbuilt(*args: Any) -> Sequence[Any]:
    raise ProviderError("fused kernel was not compiled")
