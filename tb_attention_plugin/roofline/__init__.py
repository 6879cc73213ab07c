"""Where a kernel sits on its GPU's roofline: device peaks, the cost model (FLOPs, bytes), measured
counters that replace it, and the bound each kernel gets."""
