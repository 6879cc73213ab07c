"""tb-attention: where attention spends GPU time in a PyTorch profile.

The analysis engine (``trace``, ``attention``, ``roofline``, ``report``) is shared by the
``tb-attention`` command line tool (:mod:`.cli`) and the TensorBoard plugin (:mod:`.plugin`).
"""

__version__ = "0.1.0"
