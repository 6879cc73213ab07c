"""Attention *sites*: the places in the model that make attention calls.

A model calls attention from a few places many times — every layer's self-attention, the
decoder's cross-attention, a video model's spatial and temporal attention, a draft and a target
model — and the calls of one place share their shapes, backend and bound. This module names the
site of each call; report assembly (``tb_attention_plugin/model.py``) sums them.

A call is named, in this order, by:

1. **a ``record_function`` name that reads like a module path** (``model.layers.3.self_attn``):
   standalone numbers become ``*`` (``model.layers.*.self_attn``);
2. **its nn.Module path** (Kineto's ``Class_index`` instances, outermost first) with the index
   of every *repeated* layer folded: siblings of one class under one parent whose subtrees hold
   the same attention structure (the same classes down to the attention calls, and calls of the
   same op and shapes) are one layer repeated and become ``Class_*``; siblings that differ stay
   apart by their position among that class's siblings — ``T5Stack_0`` (encoder) and
   ``T5Stack_1`` (decoder), ``Attention_0`` (spatial) and ``Attention_1`` (temporal) inside every
   ``Block_*`` — and alternating layer kinds become ``Class_[0,2,4,…]`` / ``Class_[1,3,5,…]``;
3. a plain ``record_function`` name;
4. **the user's source line** (traces recorded ``with_stack=True`` without modules);
5. **the op and its shapes**.

Indices below a folded level are positions among same-class siblings too, so the calls of
layer 0 and layer 31 get the same name. Two sites whose calls have equal shapes and equal
structure under differently named parents stay two sites; two kinds of attention with the same
class, the same parent and equal shapes are one (the trace cannot tell them apart).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

KINDS = ("annotation", "module", "source", "op")
_NUM = re.compile(r"(?<![A-Za-z0-9])\d+(?![A-Za-z0-9])")
_INSTANCE = re.compile(r"^(.*?)_(\d+)$")
_SHOWN_ORDINALS = 3


@dataclass(frozen=True)
class CallPlace:
    """What the trace says about where one attention call was made."""

    modules: tuple[str, ...] = ()  # nn.Module instances, outermost first ("LlamaModel_0", ...)
    annotation: Optional[str] = None  # the record_function name of its scope, when that is its scope
    source: Optional[str] = None  # "file:line" of the user's code around it
    signature: str = ""  # op and shapes, e.g. "aten::_scaled_dot_product_flash_attention q[8,16,1024,64]"


@dataclass(frozen=True)
class SiteName:
    name: str
    kind: str  # one of KINDS


def fold_numbers(name: str) -> str:
    """``model.layers.3.self_attn`` -> ``model.layers.*.self_attn`` (``fp8_attn`` unchanged)."""
    return _NUM.sub("*", name)


def _path_like(name: str) -> bool:
    return "." in name.strip(".") or "/" in name or bool(_NUM.search(name))


def split_instance(component: str) -> tuple[str, int]:
    """("LlamaAttention", 3) of ``LlamaAttention_3``; (name, 0) without an index."""
    m = _INSTANCE.match(component)
    return (m.group(1), int(m.group(2))) if m else (component, 0)


class _Tree:
    """The module instances that hold attention calls, as a trie of paths."""

    def __init__(self, paths: Sequence[tuple[str, ...]], signatures: Sequence[str]):
        self.children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
        self.sigs: dict[tuple[str, ...], set[str]] = {}
        for p, sig in zip(paths, signatures):
            if not p:
                continue
            for i in range(1, len(p) + 1):
                node = p[:i]
                if node not in self.sigs:
                    self.sigs[node] = set()
                    self.children.setdefault(p[: i - 1], []).append(node)
            self.sigs[p].add(sig)
        self.canon: dict[tuple[str, ...], int] = {}
        self._ids: dict[tuple[object, ...], int] = {}
        self.labels: dict[tuple[str, ...], str] = {}
        for root in self.children.get((), []):
            self._canon(root)
        self._label((), ())

    def _canon(self, node: tuple[str, ...]) -> int:
        """An id equal for two subtrees of the same attention structure (class, calls' op and
        shapes at the node, and the multiset of their children's ids)."""
        hit = self.canon.get(node)
        if hit is not None:
            return hit
        kids = tuple(sorted(self._canon(c) for c in self.children.get(node, [])))
        key = (split_instance(node[-1])[0], tuple(sorted(self.sigs.get(node, ()))), kids)
        cid = self._ids.setdefault(key, len(self._ids))
        self.canon[node] = cid
        return cid

    def _label(self, node: tuple[str, ...], label: tuple[str, ...]) -> None:
        self.labels[node] = "/".join(label)
        by_class: dict[str, list[tuple[str, ...]]] = {}
        for c in self.children.get(node, []):
            by_class.setdefault(split_instance(c[-1])[0], []).append(c)
        for cls, kids in by_class.items():
            kids = sorted(kids, key=lambda c: split_instance(c[-1])[1])
            groups: dict[int, list[int]] = {}  # canon id -> ordinals among the class's siblings
            for o, c in enumerate(kids):
                groups.setdefault(self.canon[c], []).append(o)
            for o, c in enumerate(kids):
                members = groups[self.canon[c]]
                if len(members) == 1:
                    part = f"{cls}_{o}"
                elif len(groups) == 1:
                    part = f"{cls}_*"
                else:
                    shown = ",".join(str(x) for x in members[:_SHOWN_ORDINALS])
                    part = f"{cls}_[{shown}{',…' if len(members) > _SHOWN_ORDINALS else ''}]"
                self._label(c, label + (part,))


def fold_module_paths(paths: Sequence[tuple[str, ...]], signatures: Sequence[str]) -> list[str]:
    """The folded name of each module path (``""`` for an empty one); ``signatures`` (one per
    path: the call's op and shapes) tell repeated layers from distinct siblings of one class."""
    tree = _Tree(paths, signatures)
    return [tree.labels.get(p, "") if p else "" for p in paths]


def name_sites(calls: Sequence[CallPlace]) -> tuple[list[int], list[SiteName]]:
    """The site of every call (index into the returned names, in order of first call)."""
    folded = fold_module_paths([c.modules for c in calls], [c.signature for c in calls])
    names: list[SiteName] = []
    index: dict[SiteName, int] = {}
    out: list[int] = []
    for c, mod in zip(calls, folded):
        if c.annotation and _path_like(c.annotation):
            s = SiteName(fold_numbers(c.annotation), "annotation")
        elif mod:
            s = SiteName(mod, "module")
        elif c.annotation:
            s = SiteName(c.annotation, "annotation")
        elif c.source:
            s = SiteName(c.source, "source")
        else:
            s = SiteName(c.signature or "attention", "op")
        i = index.get(s)
        if i is None:
            i = index[s] = len(names)
            names.append(s)
        out.append(i)
    return out, names
