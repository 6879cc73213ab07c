"""Recorded op inputs (``record_shapes=True``) as typed arguments.

PyTorch records, per op input: ``Input Dims`` (a shape, ``[]`` for non-tensors, a list of
shapes for tensor lists), ``Input type`` (``c10::BFloat16``, ``float``, ``Scalar``,
``TensorList``...), ``Input Strides`` and ``Concrete Inputs`` (the value of scalars, as text).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Optional

from .records import Signature

# Element sizes and short names of the types PyTorch writes into "Input type".
DTYPES: dict[str, tuple[str, int]] = {
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "c10::Float8_e8m0fnu": ("fp8", 1),
    "c10::Float4_e2m1fn_x2": ("fp4", 1),
    "int": ("int32", 4),
    "long int": ("int64", 8),
    "short int": ("int16", 2),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
    "c10::complex<c10::Half>": ("complex32", 4),
}
# c10::ScalarType enum values, as they appear in Concrete Inputs (e.g. the dtype of _to_copy).
SCALAR_TYPE_CODES: dict[int, tuple[str, int]] = {
    0: ("uint8", 1),
    1: ("int8", 1),
    2: ("int16", 2),
    3: ("int32", 4),
    4: ("int64", 8),
    5: ("fp16", 2),
    6: ("fp32", 4),
    7: ("fp64", 8),
    11: ("bool", 1),
    15: ("bf16", 2),
    23: ("fp8", 1),
    24: ("fp8", 1),
    25: ("fp8", 1),
    26: ("fp8", 1),
    44: ("fp8", 1),
    45: ("fp4", 1),  # Float8_e8m0fnu (MX scales), Float4_e2m1fn_x2 (two per byte)
}
FLOAT_DTYPES = {"fp64", "fp32", "fp16", "bf16", "fp8", "fp4"}


@dataclass(frozen=True)
class Arg:
    """One recorded input. ``shape`` is None for a non-tensor; ``shapes`` for a tensor list."""

    shape: Optional[tuple[int, ...]]
    dtype: Optional[str]  # short name (bf16, fp32...) for tensors
    itemsize: int
    strides: Optional[tuple[int, ...]]
    value: str  # Concrete Inputs text ("" when not recorded)
    shapes: Optional[tuple[tuple[int, ...], ...]] = None

    @property
    def is_tensor(self) -> bool:
        return self.shape is not None

    @property
    def dims(self) -> tuple[int, ...]:
        """The shape, () for a non-tensor (typed code reads this instead of the Optional ``shape``)."""
        return self.shape if self.shape is not None else ()

    @property
    def numel(self) -> int:
        return prod(self.shape) if self.shape is not None else 0

    @property
    def nbytes(self) -> int:
        """Logical size: every element of the shape, as if it were contiguous."""
        if self.shapes is not None:
            return sum(prod(s) for s in self.shapes) * self.itemsize
        return self.numel * self.itemsize

    @property
    def distinct_elements(self) -> int:
        """Elements of memory the tensor addresses, from its recorded strides.

        An expanded (stride-0) dimension repeats the same elements, and overlapping strides
        (``unfold``/``as_strided`` windows) cannot address more than the span from the first to
        the last element, so a kernel that reads the tensor needs at most
        min(product of the sizes of the non-zero-stride dims, span) elements from memory. Without
        usable strides: every element of the shape."""
        if self.shape is None:
            return 0
        st = self.strides
        if st is None or len(st) != len(self.shape):
            return self.numel
        if any(size == 0 for size in self.shape):
            return 0
        addressed = prod(size for size, s in zip(self.shape, st) if s != 0)
        span = 1 + sum((size - 1) * abs(s) for size, s in zip(self.shape, st))
        return min(addressed, span)

    @property
    def read_bytes(self) -> int:
        """Bytes a kernel must read to see every element once (stride-0 dims read once)."""
        if self.shapes is not None:
            return self.nbytes
        return self.distinct_elements * self.itemsize

    def is_contiguous(self) -> Optional[bool]:
        if self.shape is None or self.strides is None or len(self.strides) != len(self.shape):
            return None
        expect = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True


def _ints(x: object) -> Optional[tuple[int, ...]]:
    if isinstance(x, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in x):
        return tuple(x)
    return None


def parse_args(sig: Signature) -> list[Arg]:
    """The op's inputs in order. Shapes that are not lists of ints make the input a non-tensor."""
    dims, types, strides, concrete = sig.decoded()
    out = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) and isinstance(types[i], str) else ""
        s = strides[i] if i < len(strides) else None
        v = concrete[i] if i < len(concrete) and isinstance(concrete[i], str) else ""
        dt = DTYPES.get(t)
        shape = _ints(d)
        if t in ("TensorList", "GenericList") or (isinstance(d, list) and d and isinstance(d[0], list)):
            shapes = tuple(sh for sh in (_ints(x) for x in d) if sh is not None) if isinstance(d, list) else ()
            out.append(Arg(shape=None, dtype=None, itemsize=0, strides=None, value=v, shapes=shapes))
            continue
        if dt is None or shape is None or t in ("Scalar", "ScalarList", ""):
            # Scalars are recorded with empty dims and no tensor type.
            out.append(Arg(shape=None, dtype=None, itemsize=0, strides=None, value=v))
            continue
        out.append(Arg(shape=shape, dtype=dt[0], itemsize=dt[1], strides=_ints(s), value=v))
    return out


class SignatureArgs:
    """The parsed inputs of a trace's signatures, each parsed once: ops of one name and inputs
    repeat in every layer and step. The lists are shared between the ops that have them: callers
    read them and never change them."""

    def __init__(self, signatures: Sequence[Signature]):
        self._signatures = signatures
        self._memo: dict[int, list[Arg]] = {}

    def __call__(self, sig: int) -> Optional[list[Arg]]:
        """The inputs of signature ``sig``; None for -1 (an op recorded without inputs)."""
        if sig < 0:
            return None
        args = self._memo.get(sig)
        if args is None:
            args = self._memo[sig] = parse_args(self._signatures[sig])
        return args
