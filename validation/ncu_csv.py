"""The Nsight Compute raw-page parser, re-exported for the validation scripts.

One implementation: ``tb_attention_plugin/roofline/ncu.py`` (stdlib only). The scripts here put
the repository root on ``sys.path`` themselves; so does this module, so ``import ncu_csv`` works
from ``validation/`` without installing the package.
"""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tb_attention_plugin.roofline.ncu import (  # noqa: E402,F401
    IDENTITY_COLUMNS,
    INT_IDENTITY_COLUMNS,
    NcuTable,
    is_marker,
    is_raw_page,
    kernels,
    nvtx_column,
    parse,
    read,
    short_name,
    sniff,
    split_by_marker,
    to_number,
    unit_scale,
)

if __name__ == "__main__":  # pragma: no cover
    import runpy

    runpy.run_module("tb_attention_plugin.roofline.ncu", run_name="__main__")
