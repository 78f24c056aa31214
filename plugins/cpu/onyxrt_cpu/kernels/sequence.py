"""CPU kernels: sequences and optionals.

A sequence value is a Python ``list`` of arrays; an optional value is ``None`` when empty
and the contained value otherwise. Kernels never mutate a list they receive: SequenceInsert
and SequenceErase return new lists.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.limits import check_bytes, output_of

from . import registry


def _position(pos: Any, length: int, node: str, *, insert: bool = False) -> int:
    p = int(np.asarray(pos).reshape(-1)[0])
    limit = length if insert else length - 1
    if p < -length or p > limit:
        raise IndexError(f"{node}: position {p} is out of range for a sequence of {length}")
    return p + length if p < 0 else p


@registry.register("SequenceEmpty", since=11)
class SequenceEmpty(Kernel):
    """An empty sequence (its element type is the ``dtype`` attribute)."""

    def compute(self) -> tuple[Any, ...]:
        return ([],)


@registry.register("SequenceConstruct", since=11)
class SequenceConstruct(Kernel):
    """A sequence of the inputs, in order."""

    def compute(self, *tensors: Any) -> tuple[Any, ...]:
        return (list(tensors),)


@registry.register("SequenceInsert", since=11)
class SequenceInsert(Kernel):
    """Insert a tensor at ``position`` (default: the end)."""

    def compute(self, seq: list[Any], tensor: Any, position: Any = None) -> tuple[Any, ...]:
        out = list(seq)
        if position is None:
            out.append(tensor)
        else:
            out.insert(_position(position, len(seq), self.info.node_name, insert=True), tensor)
        return (out,)


@registry.register("SequenceAt", since=11)
class SequenceAt(Kernel):
    """The tensor at ``position`` (negative counts from the end)."""

    def compute(self, seq: list[Any], position: Any) -> tuple[Any, ...]:
        return (seq[_position(position, len(seq), self.info.node_name)],)


@registry.register("SequenceErase", since=11)
class SequenceErase(Kernel):
    """Remove the tensor at ``position`` (default: the last)."""

    def compute(self, seq: list[Any], position: Any = None) -> tuple[Any, ...]:
        out = list(seq)
        index = len(seq) - 1 if position is None else _position(position, len(seq), self.info.node_name)
        del out[index]
        return (out,)


@registry.register("SequenceLength", since=11)
class SequenceLength(Kernel):
    """The number of tensors, as an int64 scalar."""

    def compute(self, seq: list[Any]) -> tuple[Any, ...]:
        return (np.array(len(seq), dtype=np.int64),)


@registry.register("SplitToSequence", since=(11, 24))
class SplitToSequence(Kernel):
    """Split a tensor along ``axis`` into a sequence (by ``split`` sizes, or into ones)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 0))
        self.keepdims = int(info.attr("keepdims", 1))

    def compute(self, x: Any, split: Any = None) -> tuple[Any, ...]:
        x = np.asarray(x)
        axis = self.axis + x.ndim if self.axis < 0 else self.axis
        if split is None:
            parts = [np.take(x, i, axis=axis) for i in range(x.shape[axis])]
            if self.keepdims:
                parts = [np.expand_dims(p, axis) for p in parts]
            return (parts,)
        split = np.asarray(split)
        if split.ndim == 0:
            size = int(split)
            bounds = list(range(size, x.shape[axis], size))
        else:
            bounds = list(np.cumsum(split)[:-1])
        return (list(np.split(x, bounds, axis=axis)),)


@registry.register("ConcatFromSequence", since=11)
class ConcatFromSequence(Kernel):
    """Concatenate (or with ``new_axis=1`` stack) a sequence's tensors along ``axis``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis"))
        self.new_axis = int(info.attr("new_axis", 0))

    def compute(self, seq: list[Any]) -> tuple[Any, ...]:
        arrays = [np.asarray(t) for t in seq]
        # A sequence may hold one value many times (grown in a Loop): size the result first.
        check_bytes(sum(a.nbytes for a in arrays), output_of(self.info))
        if self.new_axis:
            return (np.stack(arrays, axis=self.axis),)
        return (np.concatenate(arrays, axis=self.axis),)


@registry.register("SequenceMap", since=17)
class SequenceMap(Kernel):
    """Apply ``body`` to each position of the input sequences (tensors are broadcast)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.body = info.subgraph("body")
        self.n_explicit = len(info.input_names)
        self.implicit = info.implicit_inputs

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        explicit = inputs[: self.n_explicit]
        # Values the node takes explicitly are visible to the body too.
        outer = {n: v for n, v in zip(self.info.input_names, explicit) if n}
        outer.update(zip(self.implicit, inputs[self.n_explicit :]))
        length = len(explicit[0])
        n_out = len(self.body.output_names)
        results: list[list[Any]] = [[] for _ in range(n_out)]
        for i in range(length):
            args = [v[i] if isinstance(v, list) else v for v in explicit]
            for k, out in enumerate(self.body.run(args, outer)):
                results[k].append(out)
        return tuple(results)


@registry.register("Optional", since=(15, 28))
class Optional(Kernel):
    """An optional holding the input, or an empty optional of the ``type`` attribute."""

    def compute(self, value: Any = None) -> tuple[Any, ...]:
        return (value,)


@registry.register("OptionalHasElement", since=(15, 18, 28))
class OptionalHasElement(Kernel):
    """Whether the optional (or, from v18, a plain tensor/sequence) holds a value."""

    def compute(self, value: Any = None) -> tuple[Any, ...]:
        return (np.array(value is not None),)


@registry.register("OptionalGetElement", since=(15, 18, 28))
class OptionalGetElement(Kernel):
    """The optional's value; an empty optional is an error."""

    def compute(self, value: Any) -> tuple[Any, ...]:
        if value is None:
            raise ValueError(f"OptionalGetElement {self.info.node_name!r}: the optional is empty")
        return (value,)

