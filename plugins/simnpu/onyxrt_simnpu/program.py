"""The compiled artifact: a :class:`Program` is what the NPU executes for one fused group.

A program is a *schedule*: a list of :class:`Instruction` in execution order, each naming
the device buffers it reads and writes, plus the constants (weights) baked in at compile
time in the device's storage precision. Running it walks the schedule over a table of
live buffers and drops each buffer after its last reader, which is how a device
scheduler keeps activation memory small.

Every instruction carries its cost (multiply-accumulates and bytes moved, from the static
shapes); :meth:`Program.device_time_us` turns them into simulated device time with a
roofline model: an instruction takes as long as the slower of its compute (at ``tops``)
and its memory traffic (at ``bandwidth_gbps``).

Serialization
-------------
Programs are cached on disk, so the format is designed to be *safe to load*: no pickle,
nothing executable, every byte checked before use. The layout is::

    magic (8 bytes) | version (u32 LE) | header length (u32 LE) | sha256(header) (32 bytes)
    header: UTF-8 JSON (name, io, instructions, precision, constant table, payload
            size and sha256)
    payload: the raw little-endian bytes of every constant, each 64-byte aligned

:meth:`Program.from_bytes` verifies the magic, the version, both digests and the
structure of the header, and raises :class:`CorruptProgram` on any mismatch or
truncation: a damaged cache entry is detected and rebuilt, never run.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Sequence
from dataclasses import asdict, field
from typing import Any

import numpy as np

from onyxrt.records import record

from .ops import NPU_OPS, check_precision, storage_dtype

__all__ = ["CorruptProgram", "Instruction", "Program", "FORMAT_VERSION", "MAGIC"]

#: First bytes of a serialized program.
MAGIC = b"ONYXNPU\x00"
#: Version of the serialized layout; bump it when the layout or lowering changes.
FORMAT_VERSION = 2  # 2: library-backed instructions keep the ONNX version and attributes

_PREFIX = struct.Struct("<8sII32s")
_ALIGN = 64
#: Element types a constant may have (a closed list: never an object dtype from a file).
_CONSTANT_DTYPES = frozenset({"float16", "float32", "int64", "int32", "int8", "uint8"})


class CorruptProgram(ValueError):
    """A serialized program is damaged, truncated, from another format version, or not a
    program at all; or a program's schedule is malformed."""


@record
class Instruction:
    """One op of the schedule.

    ``inputs`` and ``outputs`` name device buffers (program inputs, constants or outputs
    of earlier instructions; ``""`` marks an absent optional input or an unused output).
    ``attrs`` are plain JSON values, interpreted by ``NPU_OPS[op].run``. ``macs`` and
    ``bytes`` are the instruction's cost.
    """

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    macs: int
    bytes: int


@record(eq=False)
class Program:
    """A compiled fused group: a schedule of instructions over device buffers.

    ``inputs`` are the runtime inputs (the group's ``runtime_inputs``) in the order
    :meth:`run` takes them; ``outputs`` the values it returns, in order; ``constants``
    the weights in storage precision; ``io_types`` the storage dtype and static shape of
    every input and output (``{name: (dtype name, shape)}``).
    """

    name: str
    inputs: list[str]
    outputs: list[str]
    instructions: list[Instruction]
    constants: dict[str, np.ndarray]
    precision: str
    io_types: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    _drops: list[list[str]] | None = field(default=None, init=False, repr=False)

    # -- execution ------------------------------------------------------------------
    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Execute the schedule on storage arrays; return the outputs as storage arrays.

        Float inputs of another float dtype are converted to storage precision; a shape
        that differs from the compiled one raises ``ValueError``. Each intermediate
        buffer is dropped after its last reader. The outputs are fresh buffers that
        alias neither the inputs nor the constants.
        """
        if len(inputs) != len(self.inputs):
            raise ValueError(
                f"program {self.name!r} takes {len(self.inputs)} inputs "
                f"({', '.join(self.inputs)}), got {len(inputs)}"
            )
        env: dict[str, np.ndarray] = {}
        for name, value in zip(self.inputs, inputs):
            env[name] = self._admit(name, np.asarray(value))
        consts = self.constants
        drops = self.drop_schedule()
        for ins, drop in zip(self.instructions, drops):
            args = [None if not n else env[n] if n in env else consts[n] for n in ins.inputs]
            results = NPU_OPS[ins.op].run(args, ins.attrs, self.precision)
            for name, value in zip(ins.outputs, results):
                if name:
                    env[name] = value
            for name in drop:
                env.pop(name, None)
        fed = {id(v) for v in inputs}
        return [_owned(env[n], fed) for n in self.outputs]

    def _admit(self, name: str, value: np.ndarray) -> np.ndarray:
        """Check an input against the compiled signature (casting floats to storage)."""
        expected = self.io_types.get(name)
        if expected is None:
            return value
        dtype, shape = expected
        if tuple(value.shape) != tuple(shape):
            raise ValueError(
                f"program {self.name!r}: input {name!r} has shape {tuple(value.shape)}, "
                f"compiled for {tuple(shape)}"
            )
        if value.dtype.name != dtype:
            if value.dtype.kind != "f" or np.dtype(dtype).kind != "f":
                raise ValueError(
                    f"program {self.name!r}: input {name!r} has dtype {value.dtype}, "
                    f"compiled for {dtype}"
                )
            value = value.astype(dtype)
        return value

    def drop_schedule(self) -> list[list[str]]:
        """For each instruction, the buffers whose last reader it is."""
        if self._drops is None:
            keep = set(self.outputs) | set(self.constants)
            last: dict[str, int] = {}
            for i, ins in enumerate(self.instructions):
                for name in [*ins.inputs, *ins.outputs]:
                    if name and name not in keep:
                        last[name] = i
            drops: list[list[str]] = [[] for _ in self.instructions]
            for name, i in last.items():
                drops[i].append(name)
            self._drops = drops
        return self._drops

    # -- cost model -----------------------------------------------------------------
    def device_time_us(self, tops: float, bandwidth_gbps: float) -> float:
        """Simulated device time in microseconds: per instruction the slower of compute
        (2 ops per MAC at ``tops`` tera-ops/s) and memory traffic (at ``bandwidth_gbps``
        GB/s), summed over the schedule."""
        if tops <= 0 or bandwidth_gbps <= 0:
            raise ValueError("tops and bandwidth_gbps must be positive")
        ops_per_s, bytes_per_s = tops * 1e12, bandwidth_gbps * 1e9
        seconds = sum(
            max(2 * ins.macs / ops_per_s, ins.bytes / bytes_per_s) for ins in self.instructions
        )
        return seconds * 1e6

    def weight_bytes(self) -> int:
        """Bytes of the baked constants (what the program occupies in device memory
        before any activation)."""
        return sum(int(c.nbytes) for c in self.constants.values())

    def macs(self) -> int:
        """Total multiply-accumulates of one run."""
        return sum(ins.macs for ins in self.instructions)

    # -- validation -----------------------------------------------------------------
    def validate(self) -> None:
        """Check the schedule is well formed: known ops, every buffer defined before it
        is read and produced once, outputs produced; raise :class:`CorruptProgram`."""
        try:
            check_precision(self.precision)
        except ValueError as exc:
            raise CorruptProgram(str(exc)) from None
        defined = set(self.inputs) | set(self.constants)
        if len(defined) != len(self.inputs) + len(self.constants):
            raise CorruptProgram(f"program {self.name!r}: an input is also a constant or repeated")
        for i, ins in enumerate(self.instructions):
            if ins.op not in NPU_OPS:
                raise CorruptProgram(f"instruction {i}: unknown op {ins.op!r}")
            for name in ins.inputs:
                if name and name not in defined:
                    raise CorruptProgram(f"instruction {i} ({ins.op}) reads undefined buffer {name!r}")
            for name in ins.outputs:
                if name in defined:
                    raise CorruptProgram(f"instruction {i} ({ins.op}) redefines buffer {name!r}")
                if name:
                    defined.add(name)
        missing = [n for n in self.outputs if n not in defined]
        if missing:
            raise CorruptProgram(f"program {self.name!r}: outputs {missing} are never produced")

    # -- serialization --------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """Serialize to the safe format described in the module docstring (the same
        program always gives the same bytes)."""
        table: list[dict[str, Any]] = []
        chunks: list[bytes] = []
        offset = 0
        for name, array in self.constants.items():
            arr = np.ascontiguousarray(array)
            dt = arr.dtype.newbyteorder("<")
            raw = arr.astype(dt, copy=False).tobytes()
            pad = -offset % _ALIGN
            chunks.append(b"\x00" * pad)
            offset += pad
            table.append(
                {"name": name, "dtype": arr.dtype.name, "shape": list(arr.shape),
                 "offset": offset, "nbytes": len(raw)}
            )
            chunks.append(raw)
            offset += len(raw)
        payload = b"".join(chunks)
        header = {
            "name": self.name,
            "precision": self.precision,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "io_types": {k: [d, list(s)] for k, (d, s) in self.io_types.items()},
            "instructions": [asdict(ins) for ins in self.instructions],
            "constants": table,
            "payload_size": len(payload),
            "payload_sha256": hashlib.sha256(payload).hexdigest(),
        }
        head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
        prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(head), hashlib.sha256(head).digest())
        return prefix + head + payload

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Program:
        """Read a program written by :meth:`to_bytes`; raise :class:`CorruptProgram` on
        any damage (never returns a program built from unchecked bytes)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"expected bytes, got {type(data).__name__}")
        view = memoryview(data).cast("B")
        if len(view) < _PREFIX.size:
            raise CorruptProgram(f"truncated: {len(view)} bytes, shorter than the program prefix")
        magic, version, head_len, head_digest = _PREFIX.unpack_from(view, 0)
        if magic != MAGIC:
            raise CorruptProgram("not a simnpu program (bad magic)")
        if version != FORMAT_VERSION:
            raise CorruptProgram(
                f"program format version {version} is not supported (this build reads {FORMAT_VERSION})"
            )
        start = _PREFIX.size
        if start + head_len > len(view):
            raise CorruptProgram("truncated: the header runs past the end of the data")
        head = bytes(view[start: start + head_len])
        if hashlib.sha256(head).digest() != head_digest:
            raise CorruptProgram("header checksum mismatch")
        try:
            header = json.loads(head.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptProgram(f"unreadable header: {exc}") from None
        payload = bytes(view[start + head_len:])
        try:
            size, digest = int(header["payload_size"]), str(header["payload_sha256"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptProgram(f"malformed header: {exc!r}") from None
        if len(payload) != size:
            raise CorruptProgram(
                f"truncated payload: {len(payload)} bytes, the header says {size}"
            )
        if hashlib.sha256(payload).hexdigest() != digest:
            raise CorruptProgram("payload checksum mismatch")
        try:
            program = cls._from_header(header, payload)
        except CorruptProgram:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptProgram(f"malformed header: {exc!r}") from None
        program.validate()
        return program

    @classmethod
    def _from_header(cls, header: dict[str, Any], payload: bytes) -> Program:
        constants: dict[str, np.ndarray] = {}
        for entry in header["constants"]:
            dtype_name = str(entry["dtype"])
            if dtype_name not in _CONSTANT_DTYPES:
                raise CorruptProgram(f"constant {entry['name']!r} has unsupported dtype {dtype_name!r}")
            dt = np.dtype(dtype_name).newbyteorder("<")
            shape = tuple(_nonneg_int(d) for d in entry["shape"])
            offset, nbytes = _nonneg_int(entry["offset"]), _nonneg_int(entry["nbytes"])
            if nbytes != math.prod(shape) * dt.itemsize or offset + nbytes > len(payload):
                raise CorruptProgram(f"constant {entry['name']!r} does not fit the payload")
            arr = np.frombuffer(payload, dtype=dt, count=math.prod(shape), offset=offset)
            constants[_str(entry["name"])] = arr.astype(dt.newbyteorder("="), copy=False).reshape(shape)
        instructions = [
            Instruction(
                op=_str(i["op"]),
                inputs=[_str(n) for n in i["inputs"]],
                outputs=[_str(n) for n in i["outputs"]],
                attrs=_dict(i["attrs"]),
                macs=_nonneg_int(i["macs"]),
                bytes=_nonneg_int(i["bytes"]),
            )
            for i in header["instructions"]
        ]
        io_types = {
            _str(k): (_str(v[0]), tuple(_nonneg_int(d) for d in v[1]))
            for k, v in _dict(header["io_types"]).items()
        }
        for dtype_name, _ in io_types.values():
            if dtype_name not in _CONSTANT_DTYPES:
                raise CorruptProgram(f"unsupported io dtype {dtype_name!r}")
        return cls(
            name=_str(header["name"]),
            inputs=[_str(n) for n in header["inputs"]],
            outputs=[_str(n) for n in header["outputs"]],
            instructions=instructions,
            constants=constants,
            precision=_str(header["precision"]),
            io_types=io_types,
        )


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise CorruptProgram(f"expected a string, found {type(v).__name__}")
    return v


def _dict(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise CorruptProgram(f"expected an object, found {type(v).__name__}")
    return v


def _nonneg_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise CorruptProgram(f"expected a non-negative integer, found {v!r}")
    return v


def _owned(value: np.ndarray, fed: set[int]) -> np.ndarray:
    """``value`` itself when it is a buffer of its own, else a copy: outputs never alias
    an input (ids in ``fed``), a read-only constant or another buffer."""
    if value.flags.owndata and value.flags.writeable and id(value) not in fed:
        return value
    return value.copy()


def io_type(dtype: Any, shape: Sequence[int], precision: str) -> tuple[str, tuple[int, ...]]:
    """The ``io_types`` entry of a graph value of ``dtype`` and static ``shape``."""
    return storage_dtype(dtype, precision).name, tuple(int(d) for d in shape)
