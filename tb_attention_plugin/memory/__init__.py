"""Attention's memory and data movement: the ``memory`` block of a report.

Three parts, documented field by field in docs/report-schema.md (*The memory block*):

* **Allocations** (``devices``; allocations.py, makers.py), from the ``[memory]`` instant events
  that ``torch.profiler.profile(profile_memory=True)`` records (``Addr``, ``Bytes`` (+ alloc,
  − free), ``Total Allocated``, ``Total Reserved``, ``Device Type``, ``Device Id``). Each event
  belongs to the innermost CPU range on its thread at its timestamp (context.py), and through it
  to the attention call and phase the tagger gave that range. Figures are kept per device: CUDA
  (type 1) entries are the GPU figures; CPU (type 0) events are a device of their own, never
  mixed into a GPU's numbers. Each allocation is matched to the op that made it and that op's
  output shape (outputs.py), which says what held the peak (e.g. ``[B, H, S, S]`` scores).
* **Footprint** (``footprint``; calls.py, footprint.py), from shapes alone: K/V bytes of every
  attention call — what a KV cache holds at these shapes — and what MHA, GQA, MQA and an
  MLA-style latent cache would hold instead; the activations of a fused kernel vs the
  score-sized tensors the unfused path materialises.
* **Data movement** (``data_movement``, ``flags``; movement.py, flags.py): copies, ``aten::empty*``
  calls, memcpy/memset activities and host<->device transfers inside attention, with time and
  bytes; ``flags`` name the repeated or avoidable ones, each with the evidence that triggered it.

block.py puts the parts together. Text and CSV rendering of the block live in formats.py: this
package computes, it does not print.
"""

from .block import HOW_TO_RECORD, memory_report
from .footprint import GQA_GROUPS, MLA_LATENT_DIM, MLA_ROPE_DIM
from .outputs import op_outputs

__all__ = ["HOW_TO_RECORD", "GQA_GROUPS", "MLA_LATENT_DIM", "MLA_ROPE_DIM", "memory_report", "op_outputs"]
