"""``InferenceSession``: load, check, optimize, place, plan — then run many times.

Creation order: read the model (and its external data, checked) → validate it →
apply free-dimension overrides and user initializers → optimize → infer shapes → build
the graph IR → resolve the requested providers (warn, or fail in strict mode, for each
that cannot be used) → partition → build the execution plan (kernels created once).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import functools
import math
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from . import contrib_shapes, model_config, symbolic_shapes
from .collector import collector_paused
from .devices import EpDevice
from .discovery import (
    CPU_PROVIDER,
    KNOWN_PROVIDER_NAMES,
    PLUGINS_ENV_VAR,
    catalog,
    install_command,
)
from .dtypes import np_dtype, type_proto_string, type_string
from .errors import (
    InvalidArgument,
    InvalidInput,
    InvalidModel,
    NotImplementedOp,
    OnyxError,
    PartitionError,
    ProviderError,
    ProviderUnavailable,
)
from .fast_run import fast_run_for
from .feeds import InputCheck, check_feed, check_shape, type_name
from .functions import expand_nodes, inline_local_functions
from .gradient import expand_gradients
from .graph import Graph, check_structure, read_initializers
from .graph_replay import plan_graph_replay
from .iobinding import IOBinding
from .kernels import ValueType
from .limits import RunLimits, limits_from_config, run_limits
from .loader import LoadedModel, ParsedModel, check_model, load_model, opset_versions
from .logs import session_logger
from .model_saving import save_optimized_model
from .node_evaluation import run_nodes
from .optimizer import (
    ONNXRUNTIME_OPTIMIZER_NAMES,
    OPT_IN,
    PASSES,
    STRUCTURAL_PASSES,
    PassContext,
    optimize,
    passes_named,
)
from .options import format_option_value
from .ortvalue import OrtValue, OrtValueVector, resolve_device_provider
from .partitioner import Partitioner
from .placement import FallbackRecord, OrtEpAssignedSubgraph, PlacementReport, assigned_subgraphs
from .plan import ExecutionPlan, PlanContext, _Profile, build_plan, call_provider_hook
from .profiling import Profiler, ProfileSummary
from .protocol import ExecutionProvider, KernelRegistryProvider
from .provider_selection import configured_providers
from .records import record
from .session_options import (
    DISABLE_CPU_FALLBACK_KEY,
    EXTERNAL_DATA_FOLDER_KEY,
    EXTRA_OPTIMIZERS_KEY,
    MAX_COPIES_KEY,
    MAX_PARTITIONS_KEY,
    PIN_NODES_KEY,
    STRICT_PROVIDERS_KEY,
    ExecutionMode,
    GraphOptimizationLevel,
    RunOptions,
    SessionOptions,
)
from .shape_inference import infer_shapes
from .specialization import (
    DEFAULT_LIMIT,
    SHAPE_SPECIALIZATIONS_KEY,
    ShapeSpecializer,
    describe_sizes,
    signature_of,
)
from .status import ModelLoadCanceled
from .threads import global_thread_pool_sizes, intra_op_limit
from .warm_up import warm_up, warm_up_feeds, warm_up_runs

if TYPE_CHECKING:
    from .memory_info import OrtMemoryInfo

__all__ = ["InferenceSession", "NodeArg", "ModelMetadata", "ProviderFallbackWarning", "PlacementWarning"]

#: Function bodies may use operators that are functions themselves.
_MAX_EXPANSION_ROUNDS = 4


class ProviderFallbackWarning(UserWarning):
    """A requested provider could not be used; the session runs without it."""


class PlacementWarning(UserWarning):
    """The placement has more partitions or copies than the session config allows."""


@record(frozen=True)
class NodeArg:
    """A graph input or output: name, shape (ints, strings for symbolic dims, None for
    unknown) and type string such as ``'tensor(float)'``."""

    name: str
    type: str
    shape: list[int | str | None] | None

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


@record(frozen=True)
class ModelMetadata:
    """The model's metadata (``get_modelmeta()``)."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]


def _node_arg(
    name: str,
    declared: onnx.TypeProto | None,
    inferred: ValueType | None,
    inferred_proto: onnx.TypeProto | None,
    declared_names: Set[str] = frozenset(),
) -> NodeArg:
    """A NodeArg from the declared type, its unknown dims completed by inference, as
    onnxruntime reports it. Dim names the model declares are kept (tf2onnx writes
    'unk__214'); names onnx's shape inference invents ('unk__N') are reported as None."""
    proto = declared if declared is not None and declared.WhichOneof("value") else inferred_proto
    if proto is not None and proto.WhichOneof("value") not in (None, "tensor_type"):
        return NodeArg(name, type_proto_string(proto), _container_shape(proto))
    own = ValueType.from_proto(declared) if declared is not None else None
    vt = own if own is not None and own.elem_type else inferred
    if vt is None:
        return NodeArg(name, "unknown", None)
    tstr = type_string(vt.elem_type or 0) if vt.kind == "tensor" else vt.kind
    found = inferred.shape if inferred is not None else None
    shape = own.shape if own is not None and own.shape is not None else found
    if shape is None:
        return NodeArg(name, tstr, None)
    if found is not None and len(found) == len(shape):
        shape = tuple(d if d is not None else f for d, f in zip(shape, found))
    return NodeArg(name, tstr, [
        None if isinstance(d, str) and d.startswith("unk__") and d not in declared_names else d
        for d in shape
    ])


def _container_shape(proto: onnx.TypeProto) -> list[int | str | None] | None:
    """onnxruntime's NodeArg shape of a non-tensor value: an optional tensor's or a sparse
    tensor's dims, ``[]`` for sequences and maps."""
    which = proto.WhichOneof("value")
    if which == "optional_type":
        inner = proto.optional_type.elem_type
        return _container_shape(inner) if inner.WhichOneof("value") != "tensor_type" else (
            list(ValueType.from_proto(inner).shape or []))
    if which == "sparse_tensor_type":
        tt = proto.sparse_tensor_type
        return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
    return []


class InferenceSession:
    """Runs one model. Same constructor and methods as ``onnxruntime.InferenceSession``.

    >>> import onyxrt as ort                                          # doctest: +SKIP
    >>> sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    >>> sess.run(None, {"x": x})                                      # doctest: +SKIP
    >>> print(sess.placement)                                         # doctest: +SKIP
    """

    def __init__(
        self,
        path_or_bytes: Any,
        sess_options: SessionOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        self._disabled_passes = self._keyword_arguments(kwargs)
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        opts = self._sess_options
        self._logger = session_logger(opts.logid, opts.log_severity_level)
        self._profiler = Profiler(opts.profile_file_prefix, bool(opts.enable_profiling))
        self._run_lock: threading.Lock | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._async_pool: ThreadPoolExecutor | None = None
        self._ep_dynamic_options: dict[str, str] = {}
        self._configure_threads()
        # Kept (a reference, like onnxruntime's session keeps its bytes) so that
        # set_providers can optimize the original graph again for other providers.
        self._source = path_or_bytes
        self._limits = limits_from_config(opts.config_entries())
        # Kernels are built (and constants folded) under the limits too.
        with run_limits(self._limits), collector_paused():
            self._create(providers, provider_options)
        self._warm_up()  # with the collector back on, as the caller's runs will be

    def _keyword_arguments(self, kwargs: Mapping[str, Any]) -> frozenset[str]:
        """onnxruntime's extra keyword arguments: ``disabled_optimizers`` (its transformer
        names or onyxrt's pass names; the passes to skip), ``read_config_from_model``
        (as ``ORT_LOAD_CONFIG_FROM_MODEL``) and ``enable_fallback`` (onyxrt never retries
        on the CPU). Others are ignored with a warning, where onnxruntime ignores them
        silently."""
        extra = dict(kwargs)
        self._read_config_from_model: bool | None = None
        if "read_config_from_model" in extra:
            self._read_config_from_model = int(extra.pop("read_config_from_model")) == 1
        extra.pop("enable_fallback", None)
        disabled: set[str] = set()
        names = extra.pop("disabled_optimizers", None)
        if names:
            if isinstance(names, str):
                raise InvalidArgument("disabled_optimizers must be a list of optimizer names, not a string")
            disabled, unknown = passes_named(names)
            if unknown:
                warnings.warn(
                    f"disabled_optimizers: {unknown} name no optimizer pass of onyxrt (its passes: "
                    f"{sorted(p.name for p in (*STRUCTURAL_PASSES, *PASSES))}, or onnxruntime's "
                    f"transformer names {sorted(ONNXRUNTIME_OPTIMIZER_NAMES)}); nothing is disabled for them",
                    UserWarning,
                    stacklevel=3,
                )
        if extra:
            warnings.warn(f"InferenceSession ignores the unknown keyword arguments {sorted(extra)}",
                          UserWarning, stacklevel=3)
        return frozenset(disabled)

    def _configure_threads(self) -> None:
        """The intra-op thread count and, in parallel mode, the inter-op pool, from the
        options (or the global pool sizes, with ``use_per_session_threads = False``)."""
        opts = self._sess_options
        intra, inter = int(opts.intra_op_num_threads or 0), int(opts.inter_op_num_threads or 0)
        shared = global_thread_pool_sizes()
        if not opts.use_per_session_threads and shared is not None:
            intra, inter = shared
        self._intra_op_threads = intra
        if opts.execution_mode == ExecutionMode.ORT_PARALLEL and self._pool is None:
            workers = inter or min(4, os.cpu_count() or 1)
            self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="onyxrt-inter-op")
            weakref.finalize(self, self._pool.shutdown, wait=False)

    # -- creation --------------------------------------------------------------------
    def _create(
        self, providers: Sequence[Any] | None, provider_options: Sequence[Mapping[str, Any]] | None
    ) -> None:
        """Load → instantiate providers → optimize for them → partition and plan."""
        requested = self._requested_providers(providers, provider_options)
        instances, fallbacks = self._instantiate(requested)
        t0 = time.perf_counter()
        self._check_cancelled()
        self._loaded = self._load(self._source)
        self._options_from_model(self._loaded)
        t1 = time.perf_counter()
        self._profiler.session_event(
            "model_loading_uri" if self._loaded.path else "model_loading_array", t0, t1
        )
        self._check_cancelled()
        self._graph = self._prepare_graph(instances)
        self._inputs_check = self._build_input_checks()
        self._check_cancelled()
        self._build(requested, instances, fallbacks)
        self._specializer = self._shape_specializer(providers, provider_options)
        self._fast_run = self._make_fast_run()
        self._session_created()
        self._profiler.session_event("session_initialization", t1, time.perf_counter())

    def _session_created(self) -> None:
        """Tell every provider the plan uses that the session is built (a GPU waits here
        once for the weights it uploaded asynchronously)."""
        for provider in self._plan.used_providers:
            call_provider_hook(provider, "on_session_created")

    def _warm_up(self) -> None:
        """A few runs on synthetic feeds for a small model, so that its first runs are at
        speed (see :mod:`.warm_up`); nothing where a run could be observed."""
        runs = warm_up_runs(self._sess_options.config_entries())
        if runs <= 0 or self._profiler.enabled or self._specializer is not None or self._pool is not None:
            return
        feeds = warm_up_feeds(self._plan, self._graph.inputs, self._inputs_check)
        if feeds is not None:
            done = warm_up(lambda f: self.run(None, f), feeds, runs)
            self._logger.debug("warm-up: %d run(s) on synthetic feeds", done)

    def _shape_specializer(
        self, providers: Sequence[Any] | None, provider_options: Sequence[Mapping[str, Any]] | None
    ) -> ShapeSpecializer | None:
        """A :class:`ShapeSpecializer` when a provider refused nodes for their dynamic
        shapes (category ``"shape"``) and inputs have free dimensions (see
        :mod:`.specialization`); else None."""
        entry = self._sess_options.config_entries().get(SHAPE_SPECIALIZATIONS_KEY, str(DEFAULT_LIMIT))
        try:
            limit = int(entry)
        except ValueError:
            raise InvalidArgument(f"{SHAPE_SPECIALIZATIONS_KEY} must be a count (0 turns it off), got {entry!r}") from None
        report = self._plan.placement
        if limit <= 0 or report is None or not any(r.category == "shape" for r in report.refusals):
            return None
        self._free_input_dims = {
            name: [d.dim_param if not d.HasField("dim_value") else int(d.dim_value) for d in tp.tensor_type.shape.dim]
            for name, tp in self._declared.items()
            if name in self._inputs_check and tp.HasField("tensor_type") and tp.tensor_type.HasField("shape")
        }
        if not any(isinstance(d, str) and d for dims in self._free_input_dims.values() for d in dims):
            return None
        kwargs = {"disabled_optimizers": sorted(self._disabled_passes)} if self._disabled_passes else {}

        def build(sizes: tuple[tuple[str, int], ...]) -> InferenceSession:
            opts = copy.copy(self._sess_options)
            opts._free_dims_by_name = {**self._sess_options._free_dims_by_name, **dict(sizes)}
            opts.optimized_model_filepath = ""  # the user's file holds the generic model
            opts.enable_profiling = False
            self._logger.info("shape specialization for %s", describe_sizes(sizes))
            return InferenceSession(self._source, opts, providers, provider_options, **kwargs)

        def warn(message: str) -> None:
            self._logger.warning("%s", message)

        return ShapeSpecializer(build, limit, warn)

    def _check_cancelled(self) -> None:
        if self._sess_options._load_cancelled:
            raise ModelLoadCanceled(
                "session creation was cancelled (SessionOptions.set_load_cancellation_flag(True))"
            )

    def _options_from_model(self, loaded: LoadedModel) -> None:
        """``ORT_LOAD_CONFIG_FROM_MODEL=1``: the model's ``ort_config`` overrides the
        session options (on a copy: the caller's object is not changed)."""
        wanted = self._read_config_from_model
        if not (model_config.wanted() if wanted is None else wanted):
            return
        values, ignored = model_config.session_options_from_model(loaded.proto, loaded.origin)
        for key in ignored:
            self._logger.info("ignoring unsupported session option in the model's ort_config: %s", key)
        if not values:
            return
        opts = copy.copy(self._sess_options)
        for key, value in values.items():
            setattr(opts, key, value)
            self._logger.info("session option %s = %s from the model's ort_config", key, value)
        self._sess_options = opts
        self._profiler.enabled = self._profiler.enabled or bool(opts.enable_profiling)
        self._configure_threads()

    def _load(self, source: Any) -> LoadedModel:
        opts = self._sess_options
        loaded = load_model(
            source, opts._external_files, opts._external_initializers,
            external_folder=opts.config_entries().get(EXTERNAL_DATA_FOLDER_KEY), split_weights=True,
        )
        loaded.proto = inline_local_functions(loaded.proto)
        try:
            check_model(loaded)
        except NotImplementedOp as exc:
            if opts.custom_op_libraries():
                raise type(exc)(
                    f"{exc}. (SessionOptions.register_custom_ops_library was given "
                    f"{opts.custom_op_libraries()}; onyxrt cannot load native custom-op libraries)"
                ) from None
            raise
        loaded.proto = expand_gradients(loaded.proto)
        proto = loaded.proto
        if opts._free_dims_by_name or opts._free_dims_by_denotation:
            _apply_free_dim_overrides(proto.graph, opts._free_dims_by_name, opts._free_dims_by_denotation)
        for name, value in {**opts._external_initializers, **opts._initializers}.items():
            _replace_initializer(proto.graph, name, value)
            loaded.arrays.pop(name, None)
        return loaded

    def _extra_passes(self) -> frozenset[str]:
        """The opt-in optimizer passes ``session.extra_optimizers`` names (comma-separated);
        an unknown name is an InvalidArgument naming the ones there are."""
        raw = self._sess_options.config_entries().get(EXTRA_OPTIMIZERS_KEY, "")
        names = frozenset(n.strip() for n in raw.split(",") if n.strip())
        unknown = sorted(names - OPT_IN)
        if unknown:
            raise InvalidArgument(f"session config {EXTRA_OPTIMIZERS_KEY}: {unknown} name no opt-in optimizer "
                                  f"pass; there are: {', '.join(sorted(OPT_IN))}")
        return names

    def _prepare_graph(self, providers: Sequence[ExecutionProvider]) -> Graph:
        proto = self._loaded.proto
        self._declared_from(proto)
        try:  # before optimizing: every level must refuse the same broken graphs
            check_structure(proto.graph)
        except InvalidModel as exc:
            raise type(exc)(f"{self._loaded.origin}: {exc}") from None
        opsets = opset_versions(proto)
        infer = functools.partial(_infer_shapes, logger=self._logger)
        ctx = PassContext(
            can_run=lambda domain, op: _all_can_run(providers, domain, op, opsets),
            evaluate=functools.partial(
                _evaluate_constants, cpu=next((p for p in providers if p.name == CPU_PROVIDER), None)),
            infer_shapes=infer, fold_dequantized_weights=not any(p.uses_qdq_groups for p in providers),
            fuse_qdq_groups=all(p.integer_qdq for p in providers),
            arrays=self._loaded.arrays,
        )
        proto = optimize(proto, self._sess_options.graph_optimization_level, infer, ctx, self._disabled_passes,
                         self._extra_passes())
        if self._sess_options.optimized_model_filepath:
            save_optimized_model(proto, ctx.arrays, self._sess_options)
        try:
            arrays = read_initializers(proto.graph, ctx.arrays)
        except InvalidModel as exc:
            raise type(exc)(f"{self._loaded.origin}: {exc}") from None
        self._loaded.arrays = {}  # the graph holds what it reads
        # From here on the model is kept without its weights' bytes (the graph holds them
        # as arrays) and nothing refers into the parsed proto any more — upb frees a
        # message's memory only as a whole — so a session holds one copy of the weights.
        self._model = onnx.ModelProto()
        _skeleton_into(self._model, proto)
        self._loaded.proto = self._model
        del proto
        return self._graph_from(self._model, inferred=True, arrays=arrays)

    def _declared_from(self, proto: onnx.ModelProto) -> None:
        # What the model declares for its inputs and outputs, before shape inference adds
        # invented dim names ('unk__0'): NodeArg reports the declaration, like onnxruntime.
        self._declared: dict[str, onnx.TypeProto] = {}
        for vi in [*proto.graph.input, *proto.graph.output]:
            if vi.HasField("type"):
                self._declared[vi.name] = onnx.TypeProto()
                self._declared[vi.name].CopyFrom(vi.type)
        self._sparse_outputs = _sparse_outputs(proto.graph)
        self._declared_dim_names = frozenset(
            d.dim_param
            for vi in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]
            if vi.type.HasField("tensor_type")
            for d in vi.type.tensor_type.shape.dim
            if d.dim_param
        )

    def _graph_from(
        self, proto: onnx.ModelProto, inferred: bool = False, arrays: Mapping[str, Any] | None = None
    ) -> Graph:
        if not inferred:
            proto = _infer_shapes(proto, self._logger)
        self._types = {
            vi.name: vi.type for vi in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]
        }
        try:
            return Graph.from_proto(proto.graph, opset_versions(proto), arrays=arrays)
        except InvalidModel as exc:  # name the file in structural errors too
            raise type(exc)(f"{self._loaded.origin}: {exc}") from None

    def _build(
        self,
        requested: list[tuple[str, dict[str, Any]]],
        instances: list[ExecutionProvider],
        fallbacks: list[FallbackRecord],
    ) -> None:
        opts = self._sess_options
        ctx = PlanContext(
            providers=instances,
            partitioner=Partitioner(
                instances,
                pins=_parse_pins(opts.config_entries().get(PIN_NODES_KEY, "")),
                raise_provider_errors=True,
            ),
            opsets=self._graph.opsets,
            requested=tuple(name for name, _ in requested),
            fallbacks=tuple(fallbacks),
            option_notes=tuple(self._option_notes),
        )
        plan = self._plan_leaving_out_failures(ctx, instances, fallbacks)
        placement = plan.placement
        assert placement is not None
        if opts.config_flag(DISABLE_CPU_FALLBACK_KEY):
            on_cpu = [n.node for n in placement.nodes if n.provider == CPU_PROVIDER]
            if on_cpu:
                raise PartitionError(
                    f"{DISABLE_CPU_FALLBACK_KEY}=1 but {len(on_cpu)} node(s) would run on the CPU "
                    f"provider: {on_cpu[:10]}. See session.placement refusals for why the other "
                    "providers declined them."
                )
        self._check_placement_limits(placement)
        self._providers = instances
        plan.graph_replay = plan_graph_replay(plan, lambda message: self._logger.warning("%s", message))
        self._plan: ExecutionPlan = plan
        self._run_lock = (
            threading.Lock() if not all(p.supports_concurrent_runs() for p in instances) else None
        )
        for line in placement.summary_lines():
            self._logger.info("%s", line)
        for node in placement.nodes:
            self._logger.debug("placement: node %s (%s) -> %s", node.node, node.op_type, node.provider)

    def _plan_leaving_out_failures(
        self, ctx: PlanContext, instances: list[ExecutionProvider], fallbacks: list[FallbackRecord]
    ) -> ExecutionPlan:
        """Build the plan; a provider (other than CPU) that fails while claiming nodes,
        creating kernels, compiling or taking the weights is left out — with a warning, or
        ProviderUnavailable in strict mode — and the graph partitioned again without it."""
        while True:
            try:
                return self._plan_with_expansion(ctx)
            except ProviderError as exc:
                failed = next((p for p in instances if p.name == exc.provider), None)
                if failed is None or failed.name == CPU_PROVIDER:
                    raise
                strict = self._sess_options.config_flag(STRICT_PROVIDERS_KEY)
                self._fallback(failed.name, str(exc), "", strict, fallbacks, stacklevel=7)
                instances.remove(failed)
                ctx.providers = instances
                ctx.partitioner = Partitioner(
                    instances, pins=ctx.partitioner.pins, raise_provider_errors=True
                )
                ctx.fallbacks = tuple(fallbacks)

    def _plan_with_expansion(self, ctx: PlanContext) -> ExecutionPlan:
        """Build the plan; nodes no provider claims whose operator ONNX defines by a
        function body are expanded into that body, and the graph partitioned again."""
        for _ in range(_MAX_EXPANSION_ROUNDS):
            try:
                return build_plan(self._graph, ctx)
            except NotImplementedOp as exc:
                expanded_model, expanded = expand_nodes(self._model, exc.nodes, self._types)
                if not expanded:
                    raise
                self._logger.info("expanded into their function bodies: %s", ", ".join(expanded))
                self._model = expanded_model
                self._graph = self._graph_from(expanded_model, arrays=self._graph.initializers)
        return build_plan(self._graph, ctx)

    def _check_placement_limits(self, placement: PlacementReport) -> None:
        """Warn (or, in strict mode, fail) when the placement has more partitions or copies
        per run than the session config allows (USER_PAINS #4: partition thrash)."""
        entries = self._sess_options.config_entries()
        problems = []
        for key, actual, what in (
            (MAX_PARTITIONS_KEY, placement.partitions, "partitions"),
            (MAX_COPIES_KEY, len(placement.copies_per_run), "copies per run"),
        ):
            if key in entries:
                try:
                    limit = int(entries[key])
                except ValueError:
                    raise InvalidArgument(f"session config {key} must be an integer, got {entries[key]!r}") from None
                if actual > limit:
                    problems.append(f"{actual} {what} exceed {key}={limit}")
        if not problems:
            return
        message = ("the placement " + "; ".join(problems) + ". See session.placement (or "
                   "`onyxrt explain`) for where the graph is split; pin nodes or raise "
                   "min_subgraph_size to merge partitions.")
        if self._sess_options.config_flag(STRICT_PROVIDERS_KEY):
            raise PartitionError(message + f" (strict mode: {STRICT_PROVIDERS_KEY}=1)")
        warnings.warn(message, PlacementWarning, stacklevel=5)

    def _requested_providers(
        self, providers: Sequence[Any] | None, provider_options: Sequence[Mapping[str, Any]] | None
    ) -> list[tuple[str, dict[str, Any]]]:
        opts = self._sess_options
        if providers is None:
            if provider_options is not None:
                # onnxruntime ignores them silently; onyxrt says so.
                warnings.warn("provider_options was given without providers and is ignored; pass "
                              "providers=[...] with one options dict per provider", UserWarning, stacklevel=4)
            return [(p.name, p.options) for p in configured_providers(opts)]
        if isinstance(providers, str):
            # onnxruntime reads a string as a list of one-letter names and drops them all.
            warnings.warn(f"providers should be a list; {providers!r} is taken as [{providers!r}]",
                          UserWarning, stacklevel=4)
            providers = [providers]
        if provider_options is not None and len(provider_options) != len(providers):
            raise InvalidArgument(
                f"provider_options has {len(provider_options)} entries but providers has "
                f"{len(providers)}; give one options dict per provider"
            )
        result: list[tuple[str, dict[str, Any]]] = []
        for i, entry in enumerate(providers):
            if isinstance(entry, str):
                name, options = entry, {}
            elif isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str):
                name, options = entry[0], dict(entry[1] or {})
            else:
                raise InvalidArgument(
                    f"providers[{i}] must be a name or a (name, options) tuple, got {entry!r}"
                )
            if provider_options is not None:
                options = {**options, **dict(provider_options[i] or {})}
            if any(n == name for n, _ in result):
                # onnxruntime ignores the repeat with a warning; so does onyxrt.
                warnings.warn(f"provider {name!r} is listed twice; the second entry is ignored",
                              UserWarning, stacklevel=4)
                continue
            result.append((name, options))
        return result

    def _instantiate(
        self, requested: list[tuple[str, dict[str, Any]]]
    ) -> tuple[list[ExecutionProvider], list[FallbackRecord]]:
        cat = catalog()
        strict = self._sess_options.config_flag(STRICT_PROVIDERS_KEY)
        self._option_notes: list[str] = []
        instances: list[ExecutionProvider] = []
        fallbacks: list[FallbackRecord] = []
        for name, options in requested:
            # provides(), not names(): only the plugins up to the one that declares the
            # name are imported (a CPU-only session imports no third-party plugin).
            if not cat.provides(name):
                reason = f"{name} is not installed." + cat.suggest(name)
                if cat.excluded:
                    reason += f" ({PLUGINS_ENV_VAR} excluded: {'; '.join(cat.excluded)})"
                # '' for a provider onyxrt has no package for (suggest() says so)
                fix = install_command(name)
                self._fallback(name, reason, fix, strict, fallbacks)
                continue
            status = cat.status(name)
            if not status.usable:
                self._fallback(name, status.reason, status.fix, strict, fallbacks)
                continue
            cls = cat.provider_class(name)
            effective = cls.option_schema.validate(name, options, strict=strict)
            for note in cls.option_schema.without_effect(options):
                self._option_notes.append(f"{name}: {note}")
                self._logger.info("%s: %s", name, note)
            try:
                instances.append(cls(effective))
            except OnyxError:
                raise
            except Exception as exc:
                reason = f"{name} failed to start: {type(exc).__name__}: {exc}"
                self._fallback(name, reason, "", strict, fallbacks)
        if all(p.name != CPU_PROVIDER for p in instances):
            cpu_installed = cat.provides(CPU_PROVIDER)
            if not cpu_installed or not cat.status(CPU_PROVIDER).usable:
                raise ProviderUnavailable(
                    "the CPU provider is not available: "
                    + (cat.status(CPU_PROVIDER).reason if cpu_installed else "onyxrt-cpu is not installed")
                    + ". Install it with: pip install onyxrt-cpu"
                )
            cls = cat.provider_class(CPU_PROVIDER)
            instances.append(cls(cls.option_schema.defaults()))
        else:
            # CPU always goes last, whatever position the user gave it.
            instances.sort(key=lambda p: p.name == CPU_PROVIDER)
        return instances, fallbacks

    def _fallback(
        self, name: str, reason: str, fix: str, strict: bool, fallbacks: list[FallbackRecord],
        stacklevel: int = 5,
    ) -> None:
        if strict:
            raise ProviderUnavailable(
                f"{name} was requested but cannot be used: {_sentence(reason)}"
                + (f" Fix: {fix}." if fix else "")
                + f" (strict mode: {STRICT_PROVIDERS_KEY}=1)"
            )
        fallbacks.append(FallbackRecord(name, reason, fix))
        message = (
            f"{name} was requested but will not be used: {_sentence(reason)}"
            + (f" Fix: {fix}." if fix else "")
            + f" The session runs on the remaining providers; set the session config entry "
            f"{STRICT_PROVIDERS_KEY}=1 to make this an error."
        )
        self._logger.info("%s", message)
        # __init__/set_providers → _build → _instantiate → _fallback: point at the caller.
        warnings.warn(message, ProviderFallbackWarning, stacklevel=stacklevel)

    def _build_input_checks(self) -> dict[str, InputCheck]:
        checks = {}
        for name in [*self._graph.inputs, *self._graph.overridable]:
            vt = self._graph.value_type(name)
            checks[name] = InputCheck(
                name,
                vt.dtype if vt is not None else None,
                vt.shape if vt is not None else None,
                vt.kind if vt is not None else "unknown",
            )
        return checks

    # -- running ---------------------------------------------------------------------
    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """Run the model; return the requested outputs (all when ``output_names`` is None
        or empty) as numpy arrays, in the order requested."""
        fast = self._fast_run
        if fast is not None and run_options is None:
            return fast(output_names, input_feed)
        return self._run(output_names, input_feed, run_options)

    def _run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
             run_options: RunOptions | None) -> list[Any]:
        """:meth:`run` in Python: the reference the compiled path follows (and falls back to)."""
        names = self._output_names(output_names)
        feeds = self._check_feeds(_with_adapters(input_feed, run_options))
        return self._as_declared(names, self._execute(feeds, names, run_options, None))

    def _make_fast_run(self) -> Callable[[Any, Any], list[Any]] | None:
        """A provider package's compiled path for :meth:`run` (see :mod:`.fast_run`), where
        nothing the session does needs the Python one; else None."""
        if (self._profiler.enabled or self._specializer is not None or self._run_lock is not None
                or self._pool is not None or self._sparse_outputs):
            return None
        session = weakref.ref(self)  # the compiled path must not keep its session alive

        def slow(output_names: Any, input_feed: Any) -> list[Any]:
            owner = session()
            assert owner is not None  # a call through the session holds it
            return owner._run_fallback(output_names, input_feed)

        threads = self._intra_op_threads
        return fast_run_for(self._plan, self._inputs_check, self._graph.inputs, self._graph.outputs,
                            self._limits, (lambda: intra_op_limit(threads)) if threads > 0 else None, slow)

    def _run_fallback(self, output_names: Any, input_feed: Any) -> list[Any]:
        """What the compiled path does not handle: :meth:`_run`; a compiled path built
        before the plan's steps changed is made again first."""
        fast = self._fast_run
        if fast is not None and fast.stale():  # type: ignore[attr-defined]
            self._fast_run = self._make_fast_run()
        return self._run(output_names, input_feed, None)

    def _as_declared(self, names: list[str], outputs: list[Any]) -> list[Any]:
        """Outputs the model declares sparse (a sparse initializer it outputs) as
        :class:`~onyxrt.SparseTensor`, as onnxruntime returns them."""
        if not self._sparse_outputs:
            return outputs
        return [self._sparse_outputs.get(n, v) for n, v in zip(names, outputs)]

    def run_async(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        callback: Any,
        user_data: Any,
        run_options: RunOptions | None = None,
    ) -> None:
        """Run on a worker thread and call ``callback(outputs, user_data, error)`` there:
        outputs as from :meth:`run` and ``error`` "" on success; ``[]`` and the error's
        message on failure (a bad feed or output name included). Missing inputs raise
        here, before anything runs, as in onnxruntime."""
        if not callable(callback):
            raise InvalidArgument(f"run_async: callback must be callable, got {type(callback).__name__}")
        # As onnxruntime: missing inputs raise here; everything else reaches the callback.
        given = _with_adapters(input_feed, run_options)
        self._require_inputs(given)
        if self._async_pool is None:
            with _ASYNC_POOL_LOCK:
                if self._async_pool is None:
                    self._async_pool = ThreadPoolExecutor(
                        max_workers=max(1, self._sess_options.inter_op_num_threads or os.cpu_count() or 1),
                        thread_name_prefix="onyxrt-run-async",
                    )
                    weakref.finalize(self, self._async_pool.shutdown, wait=False)

        def work() -> None:
            try:
                names = self._output_names(output_names)
                outputs = self._execute(self._check_feeds(given), names, run_options, None)
            except Exception as exc:
                callback([], user_data, str(exc))
                return
            callback(outputs, user_data, "")

        self._async_pool.submit(work)

    def _execute(
        self,
        feeds: dict[str, Any],
        names: list[str],
        run_options: RunOptions | None,
        keep_on_device: Mapping[str, bool] | None,
        device_feeds: Mapping[str, tuple[Any, ExecutionProvider]] | None = None,
    ) -> list[Any]:
        if self._specializer is not None and not keep_on_device and not device_feeds:
            special = self._specializer.session_for(signature_of(self._free_input_dims, feeds))
            if special is not None:
                return special._execute(feeds, names, run_options, None)
        limits = self._limits.with_run_options(run_options)
        if self._profiler.enabled:
            profile = _Profile()
            with self._run_context(limits):
                t0 = time.perf_counter()
                outputs = self._plan.run(feeds, names, run_options, profile, keep_on_device, self._pool, device_feeds)
                t1 = time.perf_counter()
            self._profiler.session_event("model_run", t0, t1)
            self._profiler.node_events(self._plan, profile.events)
            return outputs
        if self._run_lock is None:  # the common case, kept lean (no generator context)
            if self._intra_op_threads <= 0:
                with run_limits(limits, guard_memory=True):
                    return self._plan.run(feeds, names, run_options, None, keep_on_device, self._pool, device_feeds)
            with intra_op_limit(self._intra_op_threads), run_limits(limits, guard_memory=True):
                return self._plan.run(feeds, names, run_options, None, keep_on_device, self._pool, device_feeds)
        with self._run_context(limits):
            return self._plan.run(feeds, names, run_options, None, keep_on_device, self._pool, device_feeds)

    @contextlib.contextmanager
    def _run_context(self, limits: RunLimits) -> Iterator[None]:
        """What a run holds: the session's run lock (providers that cannot run
        concurrently), the BLAS pool limit and the run's limits (with the memory guard)."""
        lock = self._run_lock if self._run_lock is not None else contextlib.nullcontext()
        with lock, intra_op_limit(self._intra_op_threads), run_limits(limits, guard_memory=True):
            yield

    def run_with_ort_values(
        self,
        output_names: Sequence[str] | None,
        input_dict_ort_values: Mapping[str, OrtValue],
        run_options: RunOptions | None = None,
    ) -> list[OrtValue]:
        """Run with ``OrtValue`` inputs; return ``OrtValue`` outputs."""
        names = self._output_names(output_names)
        feeds = self._check_feeds(_with_adapters(input_dict_ort_values, run_options))
        return [OrtValue(v) for v in self._as_declared(names, self._execute(feeds, names, run_options, None))]

    def run_with_ortvaluevector(
        self,
        run_options: RunOptions | None,
        feed_names: Sequence[str],
        feeds: Sequence[OrtValue],
        fetch_names: Sequence[str],
        fetches: OrtValueVector,
        fetch_devices: Sequence[Any] = (),
    ) -> None:
        """onnxruntime's low-level run: ``feeds`` (an ``OrtValueVector``) by
        ``feed_names``; the outputs ``fetch_names`` are appended to ``fetches``."""
        if len(feed_names) != len(feeds):
            raise InvalidArgument(f"run_with_ortvaluevector: {len(feed_names)} feed names but {len(feeds)} feeds")
        outputs = self.run_with_ort_values(list(fetch_names), dict(zip(feed_names, feeds)), run_options)
        for value in outputs:
            fetches.push_back(value)

    def create_ortvalue_from_shape_and_type(
        self, shape: Sequence[int], element_type: Any, device_type: str, device_id: int = 0, vendor_id: int = -1
    ) -> OrtValue:
        """A new tensor on a device (``OrtValue.ortvalue_from_shape_and_type``)."""
        return OrtValue.ortvalue_from_shape_and_type(shape, element_type, device_type, device_id, vendor_id)

    def io_binding(self) -> IOBinding:
        """A new :class:`IOBinding` for this session."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: RunOptions | None = None) -> None:
        """Run with bound inputs and outputs; results via ``iobinding.get_outputs()``."""
        bound_out = iobinding.outputs
        names = self._output_names(list(bound_out) or None)
        host_inputs = {}
        device_feeds: dict[str, tuple[Any, ExecutionProvider]] = {}
        for name, value in iobinding.inputs.items():
            holder = value.provider
            if holder is None or holder.device.is_host:
                host_inputs[name] = value.numpy()
            else:
                self._check_device_feed(name, value)
                device_feeds[name] = (value.value, holder)
        feeds = self._check_feeds(host_inputs, also_given=device_feeds)
        # Outputs bound to a device (a device name, or a preallocated device buffer) stay
        # where their producer leaves them when it is that device's memory: no round trip
        # through the host, and a preallocated buffer is filled device to device.
        keep = {}
        for name in names:
            binding = bound_out.get(name)
            if binding is None:
                continue
            if binding.target is not None:
                holder = binding.target_on_device()
            elif binding.device_type != "cpu":
                holder = resolve_device_provider(binding.device_type, binding.device_id)
            else:
                continue
            if holder is None:
                continue
            _, owner = self._plan.output_slots[name]
            keep[name] = holder.device.memory_space == self._providers[owner].device.memory_space
        values = self._execute(feeds, names, run_options, keep, device_feeds)
        results: list[OrtValue] = []
        for name, value in zip(names, values):
            binding = bound_out.get(name)
            if binding is None or binding.device_type == "cpu" and binding.target is None:
                results.append(OrtValue(value))
            elif binding.target is not None:
                producer = self._providers[self._plan.output_slots[name][1]] if keep.get(name) else None
                results.append(binding.fill(name, value, producer))
            elif keep.get(name):
                results.append(OrtValue(value, self._providers[self._plan.output_slots[name][1]]))
            else:
                results.append(OrtValue.ortvalue_from_numpy(value, binding.device_type, binding.device_id))
        iobinding._set_results(results)

    def _output_names(self, output_names: Sequence[str] | None) -> list[str]:
        all_outputs = self._graph.outputs
        if output_names is None:
            return list(all_outputs)
        if isinstance(output_names, (str, bytes)) or not isinstance(output_names, Iterable):
            raise InvalidArgument(
                f"output_names must be a list of output names (or None for all), got "
                f"{type(output_names).__name__} {output_names!r}; pass e.g. {all_outputs[:1]}"
            )
        if not output_names:
            return list(all_outputs)
        names = list(output_names)
        for name in names:
            if not isinstance(name, str):
                raise InvalidArgument(
                    f"output_names must hold strings, got {type(name).__name__} {name!r}. "
                    f"The model's outputs are: {all_outputs}"
                )
            if name not in self._plan.output_slots:
                close = difflib.get_close_matches(name, all_outputs, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise InvalidArgument(
                    f"unknown output name {name!r}.{hint} The model's outputs are: {all_outputs}"
                )
        return names

    def _check_device_feed(self, name: str, value: OrtValue) -> None:
        """A device-resident input must match the model's type and fixed dims too."""
        check = self._inputs_check.get(name)
        if check is None:
            raise InvalidInput(f"unknown input name {name!r}. The model's inputs are: {self._graph.inputs}")
        shape, dtype = value.shape(), value.numpy_dtype()
        if check.dtype is not None and dtype != check.dtype:
            raise InvalidInput(
                f"input {name!r}: unexpected data type {type_name(dtype)} on "
                f"{value.device_name()}, expected {type_name(check.dtype)}"
            )
        check_shape(check, tuple(shape), f" (on {value.device_name()})")

    def _check_feeds(
        self, input_feed: Mapping[str, Any], also_given: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        if type(input_feed) is not dict and not isinstance(input_feed, Mapping):
            raise InvalidInput(f"input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        checks = self._inputs_check
        feeds: dict[str, Any] = {}
        for name, value in input_feed.items():
            check = checks.get(name)
            if check is None:
                close = difflib.get_close_matches(str(name), list(checks), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise InvalidInput(
                    f"unknown input name {name!r}.{hint} The model's inputs are: {self._graph.inputs}"
                )
            feeds[name] = check_feed(check, value)
        if len(feeds) != len(checks):  # every input that can be fed was fed: none is missing
            self._require_inputs(feeds, also_given)
        return feeds

    def _require_inputs(self, given: Mapping[str, Any], also_given: Mapping[str, Any] | None = None) -> None:
        """Every model input must be given (in one of the two mappings)."""
        missing = [n for n in self._graph.inputs if n not in given and n not in (also_given or {})]
        if missing:
            raise InvalidInput(
                f"required input(s) missing: {missing}. The model's inputs are: {self._graph.inputs}"
            )

    # -- introspection -------------------------------------------------------------------
    def _node_args(self, names: Sequence[str]) -> list[NodeArg]:
        return [
            _node_arg(n, self._declared.get(n), self._graph.value_type(n), self._types.get(n),
                      self._declared_dim_names)
            for n in names
        ]

    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs (initializers excluded)."""
        return self._node_args(self._graph.inputs)

    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs."""
        return self._node_args(self._graph.outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Inputs that have an initializer as default value."""
        return self._node_args(self._graph.overridable)

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata (``version`` is 2**63 - 1 when the model sets none, as in
        onnxruntime)."""
        m = self._model
        return ModelMetadata(
            producer_name=m.producer_name,
            graph_name=m.graph.name,
            domain=m.domain,
            description=m.doc_string,
            graph_description=m.graph.doc_string,
            version=int(m.model_version) if m.HasField("model_version") else _UNSET_MODEL_VERSION,
            custom_metadata_map={p.key: p.value for p in m.metadata_props},
        )

    def _value_provider(self, name: str, as_input: bool) -> ExecutionProvider:
        """The provider that reads input ``name`` first (or produces output ``name``)."""
        by_node = {n.node: n.provider for n in self.placement.nodes}
        nodes = self._graph.nodes
        if as_input:
            owner = next((by_node.get(n.name) for n in nodes if name in n.inputs), None)
        else:
            owner = next((by_node.get(n.name) for n in nodes if name in n.outputs), None)
        return next((p for p in self._providers if p.name == owner), self._providers[-1])

    def _memory_info_of(self, provider: ExecutionProvider) -> OrtMemoryInfo:
        from .memory_info import OrtMemoryInfo

        device = provider.device
        name = "cpu" if device.is_host else (provider.device_names[0] if provider.device_names else device.type)
        return OrtMemoryInfo.for_device(name, device.device_id, device.vendor_id)

    def get_input_memory_infos(self) -> list[OrtMemoryInfo]:
        """Where each input is read: the memory of the provider that consumes it."""
        return [self._memory_info_of(self._value_provider(n, True)) for n in self._graph.inputs]

    def get_output_memory_infos(self) -> list[OrtMemoryInfo]:
        """Where each output is produced: the memory of the provider that makes it."""
        return [self._memory_info_of(self._value_provider(n, False)) for n in self._graph.outputs]

    def get_input_epdevices(self) -> list[EpDevice]:
        """The (provider, device) that consumes each input."""
        devices = catalog().ep_devices()
        result = []
        for name in self._graph.inputs:
            provider = self._value_provider(name, True)
            match = next((d for d in devices if d.ep_name == provider.name
                          and d.device.device_id == provider.device.device_id), None)
            result.append(match if match is not None else EpDevice(provider.name, provider.vendor, provider.device))
        return result

    def get_provider_graph_assignment_info(self) -> list[OrtEpAssignedSubgraph]:
        """Which provider runs which nodes: one entry per fused group or single kernel
        (onnxruntime needs ``session.record_ep_graph_assignment_info=1`` for this; onyxrt
        always knows it, and :attr:`placement` says more)."""
        domains = {n.name: n.domain for n in self._graph.nodes}
        return assigned_subgraphs(self.placement, domains)

    def set_ep_dynamic_options(self, options: Mapping[str, str]) -> None:
        """onnxruntime passes these to its providers between runs (e.g.
        ``ep.dynamic.workload_type``). onyxrt's providers take none: the options are
        recorded (:meth:`get_ep_dynamic_options`) and logged."""
        for key, value in dict(options).items():
            self._ep_dynamic_options[str(key)] = str(value)
            self._logger.info("ep dynamic option %s=%s recorded; no provider in this session uses it", key, value)

    def get_ep_dynamic_options(self) -> dict[str, str]:
        """The options given to :meth:`set_ep_dynamic_options`."""
        return dict(self._ep_dynamic_options)

    def get_tuning_results(self) -> list[Any]:
        """Tuning results of tunable kernels: onyxrt has none, so ``[]``."""
        return []

    def set_tuning_results(self, results: Sequence[Any], *, error_on_invalid: bool = False) -> None:
        """Accept tuning results from another session; onyxrt has no tunable kernels, so
        they are ignored (with ``error_on_invalid=True`` non-empty results are refused)."""
        if error_on_invalid and results:
            raise InvalidArgument("set_tuning_results: onyxrt has no tunable kernels these results could apply to")

    def release_captured_graph(self, graph_annotation_id: int = 0) -> None:
        """Free the CUDA graphs captured with ``enable_cuda_graph=1`` and their device
        memory (all of them: onyxrt keys graphs by input shapes, not annotation ids); the
        next runs capture again. A no-op without graph replay."""
        replay = self._plan.graph_replay
        if replay is not None:
            replay.release()

    def get_providers(self) -> list[str]:
        """Providers in this session, in priority order (CPU last)."""
        return [p.name for p in self._providers]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        """Effective options of each provider in the session, as strings. Options a
        provider accepts without effect are left out (the placement report lists the ones
        you set: ``option without effect: ...``)."""
        return {
            p.name: {
                k: format_option_value(v) for k, v in p.effective_options().items()
                if not getattr(p.option_schema.options.get(k), "no_effect", "")
            }
            for p in self._providers
        }

    def set_providers(
        self,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Rebuild the session for a new provider list: the original model is optimized
        again for those providers, then partitioned and planned. On failure the session
        keeps its previous configuration."""
        if providers is not None and not isinstance(providers, str):
            # As onnxruntime: a name no build knows is an error here (the constructor
            # only warns); a known provider that is missing falls back with a warning.
            for entry in providers:
                name = entry[0] if isinstance(entry, (tuple, list)) and entry else entry
                if isinstance(name, str) and name not in KNOWN_PROVIDER_NAMES and not catalog().provides(name):
                    raise ProviderUnavailable(
                        f"Unknown Provider Type: {name}. Installed providers: {catalog().names()}."
                        + catalog().suggest(name)
                    )
        previous = dict(self.__dict__)
        try:
            with collector_paused():
                self._create(providers, provider_options)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(previous)
            raise
        self._warm_up()

    @property
    def _sess(self) -> InferenceSession:
        """onnxruntime's private native session, which third-party code reaches for
        (``sess._sess.run_with_iobinding(...)``): the session itself."""
        return self

    def get_session_options(self) -> SessionOptions:
        """The options the session was created with."""
        return self._sess_options

    @property
    def placement(self) -> PlacementReport:
        """Where each node runs, fused groups, copies, refusals and fallbacks; with the
        shape specializations built so far (:mod:`.specialization`)."""
        assert self._plan.placement is not None
        if self._specializer is None or not self._specializer.sessions:
            return self._plan.placement
        return dataclasses.replace(
            self._plan.placement,
            specializations={k: v.placement for k, v in self._specializer.sessions.items()},
        )

    @property
    def fallbacks(self) -> list[FallbackRecord]:
        """Requested providers that could not be used, with the reasons."""
        return list(self.placement.fallbacks)

    def memory_stats(self) -> dict[str, dict[str, int | None]]:
        """Allocator statistics per provider that has an allocator."""
        result = {}
        for p in self._providers:
            stats = p.memory_stats()
            if stats is not None:
                result[p.name] = stats.as_dict()
        return result

    def release_cached_memory(self) -> int:
        """Give every provider's cached memory back; return the bytes released."""
        return sum(p.release_cached_memory() for p in self._providers)

    def profile_summary(self) -> ProfileSummary:
        """Time per provider, per op type, copy time and device time of the runs profiled
        so far (needs ``SessionOptions.enable_profiling``)."""
        if not self._profiler.enabled:
            raise InvalidArgument(
                "profile_summary() needs profiling: set SessionOptions.enable_profiling = True "
                "(and call it before end_profiling())"
            )
        return self._profiler.summary()

    def end_profiling(self) -> str:
        """Stop profiling and write the trace; return its file name ('' if not profiling)."""
        if not self._profiler.enabled:
            return ""
        return self._profiler.end()

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started (``time.perf_counter_ns`` clock)."""
        return self._profiler.start_ns

    def disable_fallback(self) -> None:
        """Kept for onnxruntime compatibility: onyxrt never retries a failed creation on
        CPU behind your back, so there is nothing to disable."""

    def enable_fallback(self) -> None:
        """Kept for onnxruntime compatibility (see :meth:`disable_fallback`)."""

    def _sync_providers(self) -> None:
        for p in self._providers:
            p.sync()


#: onnxruntime's ModelMetadata.version for a model that sets no model_version (INT64_MAX).
_UNSET_MODEL_VERSION = 2**63 - 1
_ASYNC_POOL_LOCK = threading.Lock()


def _sparse_outputs(graph: onnx.GraphProto) -> dict[str, Any]:
    """Graph outputs declared sparse that are sparse initializers, as SparseTensors (COO)
    in the form onnxruntime returns: linear indices, sorted, one value per index (the
    last given), explicit zeros left out. Bad indices raise InvalidGraph (shared check)."""
    declared = {vi.name for vi in graph.output if vi.type.HasField("sparse_tensor_type")}
    result: dict[str, Any] = {}
    if not declared:
        return result
    from .errors import InvalidGraph
    from .sparse import SparseTensor, canonical_coo, coo_linear_indices

    for st in graph.sparse_initializer:
        if st.values.name not in declared:
            continue
        what = f"sparse initializer {st.values.name!r}"
        values = onnx.numpy_helper.to_array(st.values)
        if values.ndim != 1:
            raise InvalidGraph(f"{what}: values must be 1-D (one per index), got shape {list(values.shape)}")
        dims = [int(d) for d in st.dims]
        indices = onnx.numpy_helper.to_array(st.indices)
        linear = coo_linear_indices(indices, dims, values.size, what, InvalidGraph)
        values, linear = canonical_coo(values, linear)
        result[st.values.name] = SparseTensor.sparse_coo_from_numpy(dims, values, linear, None)
    return result


def _with_adapters(feeds: Mapping[str, Any], run_options: RunOptions | None) -> Mapping[str, Any]:
    """The feeds plus the parameters of the run's active LoRA adapters."""
    if run_options is None or not run_options._adapters:
        return feeds
    extra = run_options.adapter_feeds()
    both = sorted(set(extra) & set(feeds))
    if both:
        raise InvalidInput(
            f"input(s) {both} are given both in the feed and by an active LoRA adapter; feed each once"
        )
    return {**feeds, **extra}


#: Initializers larger than this lend only their shape to shape inference, not their bytes.
_INFERENCE_BYTES = 4096


def _evaluate_constants(
    model: onnx.ModelProto, arrays: Mapping[str, Any], cpu: ExecutionProvider | None = None
) -> list[Any]:
    """The outputs of ``model`` (which has no inputs; ``arrays`` the values of its
    data-less initializers) run on onyxrt's CPU provider with the optimizer off: how
    constant folding computes the nodes it folds, exactly as a run would
    (:attr:`~onyxrt.optimizer.PassContext.evaluate`). Plain nodes run on the session's
    CPU provider ``cpu`` directly (:func:`~onyxrt.node_evaluation.run_nodes`); anything
    else through a session of their own."""
    if isinstance(cpu, KernelRegistryProvider):
        values = run_nodes(model, arrays, cpu)
        if values is not None:
            return values
    options = SessionOptions()
    options.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    session = InferenceSession(ParsedModel(model, arrays, "<constant folding>"), options, providers=[CPU_PROVIDER])
    return session.run(None, {})


def _all_can_run(
    providers: Sequence[ExecutionProvider], domain: str, op_type: str, opsets: Mapping[str, int]
) -> bool:
    """Whether every provider has a kernel for ``domain::op_type`` at the model's opset
    for that domain (the optimizer's question before producing a fused operator)."""
    from .optimizer import FUSED_DOMAIN_VERSION

    version = opsets.get(domain, FUSED_DOMAIN_VERSION if domain else 0)
    for provider in providers:
        if not isinstance(provider, KernelRegistryProvider):
            return False
        kdef, _ = provider.registry.lookup(domain, op_type, version)
        if kdef is None:
            return False
    return True


#: Rounds of symbolic propagation and re-inference at most (exports settle in two or three).
_SYMBOLIC_ROUNDS = 8


def _infer_shapes(proto: onnx.ModelProto, logger: Any) -> onnx.ModelProto:
    """Run onnx's shape inference and record its findings in ``proto`` (in place).

    onnx's inference copies the whole model into C++ and back, which would dominate session
    creation for large models; it runs on a skeleton instead: the same nodes, inputs and
    outputs, with big initializers reduced to their names, types and dims (data
    propagation only needs small constants). The inferred ``value_info`` and output types
    are then copied into ``proto``, whose weights are never copied."""
    skeleton = onnx.ModelProto()
    _skeleton_into(skeleton, proto)
    # A rerun (after folding made shapes constant) must not keep the placeholders the last
    # run invented for what it did not know: onnx keeps a dimension name it is given.
    symbolic_shapes.forget_invented(skeleton.graph)
    # onnx's inference stops at the com.microsoft operators tools write (MatMulNBits...):
    # standard stand-ins in the skeleton carry it through them.
    contrib_shapes.stand_in(skeleton)
    try:
        inferred = infer_shapes(skeleton, check_type=False, strict_mode=False, data_prop=True)
        # Symbolic dimensions through computed shapes (seq*12 where onnx says unk__3), each
        # round carried on by onnx's inference, until nothing new is found. A graph without
        # inputs (constant folding's evaluation) has no free dimension to follow.
        for _ in range(_SYMBOLIC_ROUNDS if skeleton.graph.input else 0):
            if not symbolic_shapes.propagate(inferred):
                break
            inferred = infer_shapes(inferred, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # shape inference is an aid; the model may still run
        logger.info("shape inference failed (%s); continuing without it", exc)
        return proto
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(inferred.graph.value_info)
    for declared, found in zip(proto.graph.output, inferred.graph.output, strict=True):
        declared.type.CopyFrom(found.type)
    return proto


def _skeleton_into(skeleton: onnx.ModelProto, proto: onnx.ModelProto) -> None:
    """Copy ``proto`` into ``skeleton`` except the bytes of initializers over
    ``_INFERENCE_BYTES``, which keep only name, type and dims."""
    graph = proto.graph
    for field, value in proto.ListFields():
        if field.name == "graph":
            continue
        if hasattr(value, "extend"):  # repeated fields
            getattr(skeleton, field.name).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(skeleton, field.name).CopyFrom(value)
        else:
            setattr(skeleton, field.name, value)
    sk = skeleton.graph
    sk.name = graph.name
    sk.node.extend(graph.node)
    sk.input.extend(graph.input)
    sk.output.extend(graph.output)
    sk.value_info.extend(graph.value_info)
    sk.sparse_initializer.extend(graph.sparse_initializer)
    for tensor in graph.initializer:
        # By element count: measuring the bytes would make upb serialize the tensor.
        if math.prod(tensor.dims) * 4 > _INFERENCE_BYTES:
            sk.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
        else:
            sk.initializer.append(tensor)


def _sentence(text: str) -> str:
    """``text`` ending with a full stop (reasons are joined with a following 'Fix: ...')."""
    text = text.rstrip()
    return text if text.endswith((".", "?", "!", ")")) else text + "."


def _parse_pins(text: str) -> dict[str, str]:
    pins = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        key, sep, provider = item.partition("=")
        if not sep or not key.strip() or not provider.strip():
            raise InvalidArgument(
                f"{PIN_NODES_KEY}: expected 'node_or_op=Provider;...', got {item!r}"
            )
        pins[key.strip()] = provider.strip()
    return pins


def _apply_free_dim_overrides(graph: onnx.GraphProto, by_name: Mapping[str, int], by_denotation: Mapping[str, int]) -> None:
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        if not vi.type.HasField("tensor_type"):
            continue
        for dim in vi.type.tensor_type.shape.dim:
            value = None
            if dim.HasField("dim_param") and dim.dim_param in by_name:
                value = by_name[dim.dim_param]
            elif dim.denotation and dim.denotation in by_denotation:
                value = by_denotation[dim.denotation]
            if value is not None:
                dim.ClearField("dim_param")
                dim.dim_value = int(value)


def _replace_initializer(graph: onnx.GraphProto, name: str, value: Any) -> None:
    arr = value.numpy() if isinstance(value, OrtValue) else np.asarray(value)
    for i, t in enumerate(graph.initializer):
        if t.name == name:
            if tuple(t.dims) != arr.shape or np_dtype(t.data_type) != arr.dtype:
                raise InvalidArgument(
                    f"add_initializer({name!r}): shape {arr.shape} / dtype {arr.dtype} do not match "
                    f"the model's {tuple(t.dims)} / {np_dtype(t.data_type)}"
                )
            graph.initializer[i].CopyFrom(onnx.numpy_helper.from_array(arr, name))
            return
    raise InvalidArgument(f"add_initializer({name!r}): the model has no initializer of that name")
