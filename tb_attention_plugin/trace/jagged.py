"""What a trace records of a jagged (nested) tensor's sequence lengths.

The varlen kernels' own inputs carry only the packed total, the sequence count and the longest
sequence (``cu_seqlens`` is a tensor: its values are not recorded). Two other ops can say more:

* the nested tensor's construction: ``torch.nested.nested_tensor([...], layout=torch.jagged)`` cats
  its pieces, so the profiler records a tensor list of ``n`` shapes whose first dims are the lengths
  (only when the tensor is built inside the profiled step);
* its views: torch keeps a nested tensor's min/max sequence lengths as the first dims of two [L, 0]
  tensors (``aten::_nested_view_from_jagged(values, offsets, dummy, lengths, ragged_idx, min_seqlen,
  max_seqlen)``), so every view records the shortest.

The FLOPs ledger (model.py) and the replay (replay/calls.py) both ask here, once per trace.
"""

from __future__ import annotations

from typing import Any, Optional

from .shapes import Arg, parse_args

NESTED_VIEW = "aten::_nested_view_from_jagged"


class JaggedLengths:
    """The lengths and the shortest sequence of a trace's jagged calls, memoised per trace."""

    def __init__(self, trace: Any):
        self.t = trace
        self._lists: Optional[dict[tuple[int, int], set[tuple[int, ...]]]] = None
        self._shortest: Optional[dict[tuple[int, int, int], set[int]]] = None

    def sequence_lengths(self, n: int, total: int, longest: int) -> Optional[tuple[int, ...]]:
        """Per-sequence lengths of a jagged call whose packed tensors hold ``total`` tokens in ``n``
        sequences, the longest ``longest``: a tensor list of ``n`` pieces whose first dims sum to
        ``total`` with that maximum, recorded by an op of the trace, when exactly one such list exists."""
        if self._lists is None:
            self._lists = {}
            R = self.t.ranges
            for sig_id in sorted(set(int(x) for x in R["sig"].tolist() if x >= 0)):
                for a in parse_args(self.t.signatures[sig_id]):
                    if a.shapes and len(a.shapes) > 1 and all(len(sh) >= 1 for sh in a.shapes):
                        lens = tuple(int(sh[0]) for sh in a.shapes)
                        self._lists.setdefault((len(lens), sum(lens)), set()).add(lens)
        found = {x for x in self._lists.get((n, total), set()) if max(x) == longest}
        return next(iter(found)) if len(found) == 1 else None

    def shortest(self, n: int, total: int, longest: int) -> Optional[int]:
        """The shortest sequence of a jagged call (``n`` sequences, ``total`` tokens, the longest
        ``longest``) from the nested tensor's views; None unless every view of that total, count and
        maximum says the same."""
        if self._shortest is None:
            self._shortest = {}
            R, strings = self.t.ranges, self.t.strings
            names, sigs = R["name"], R["sig"]
            parsed: dict[int, list[Arg]] = {}
            for r in range(len(names)):
                sig = int(sigs[r])
                if sig < 0 or str(strings[names[r]]) != NESTED_VIEW:
                    continue
                a = parsed.get(sig)
                if a is None:
                    a = parsed[sig] = parse_args(self.t.signatures[sig])
                if len(a) < 7 or not all(x.is_tensor for x in (a[0], a[1], a[5], a[6])):
                    continue
                v, off, lo, hi = a[0].dims, a[1].dims, a[5].dims, a[6].dims
                if len(off) == 1 and len(v) >= 1 and len(lo) == 2 and len(hi) == 2 and lo[1] == 0 and hi[1] == 0:
                    self._shortest.setdefault((off[0] - 1, v[0], hi[0]), set()).add(lo[0])
        found = self._shortest.get((n, total, longest), set())
        return next(iter(found)) if len(found) == 1 else None
