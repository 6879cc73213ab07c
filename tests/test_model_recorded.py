"""Sites, the FLOPs ledger and the FFN boundary on the H200 recordings of 2026-12-01 (issue #23's
"Done when"): tests/data/twins (validation/twins.py) and tests/data/round3
(validation/round3_workloads.py, each run's shapes in validation/round3/2026-12-01/meta).

Every expectation is computed here from the workload's recorded shapes and the trace's own kernel
durations — the math, not the tool's figures."""

import functools
import glob
import gzip
import json
import os

import pytest

from helpers import ROOT
from tb_attention_plugin.analyze import analyze_path

META = os.path.join(ROOT, "validation", "round3", "2026-12-01", "meta")
MANIFEST = os.path.join(ROOT, "validation", "twins", "2026-12-01", "manifest.json")


def trace_file(run: str) -> str:
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "data", run, "*.pt.trace.json*")))
    assert files, run
    return files[0]


@functools.cache
def report(run: str) -> dict:
    rep = analyze_path(trace_file(run))
    assert rep["status"] == "ok", rep.get("warnings")
    return rep


def meta(run: str) -> dict:
    with open(os.path.join(META, f"{run}.json")) as f:
        return json.load(f)


def profiler_steps(run: str) -> int:
    """ProfilerStep#N annotations of the raw trace."""
    with gzip.open(trace_file(run), "rt") as f:
        events = json.load(f)["traceEvents"]
    return len({e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})


def site_rows(rep: dict, site: str, phase: str) -> list[dict]:
    return [k for k in rep["kernels"] if k.get("site") == site and k["phase"] == phase]


# -- sites: an encoder-decoder -------------------------------------------------------------------
T5 = "T5Model_0/T5Stack_{}/T5Block_*/T5Layer{}Attention_0"
T5_RUNS = ["twins/t5_eager", "twins/t5_sdpa", "round3/r3_t5_eager_fwd", "round3/r3_t5_sdpa_fwd"]


@pytest.mark.parametrize("run", T5_RUNS)
def test_t5_sites_separate_encoder_decoder_self_and_cross(run):
    """transformers T5Model, 2 encoder and 2 decoder layers (round3_workloads.build_t5: batch 4,
    encoder 512 tokens, decoder 128, 8 heads of 64): three sites — encoder self-attention,
    decoder self-attention, decoder cross-attention (EncDecAttention) — each holding both layers
    (the first layer's relative-position bias computation does not split it off)."""
    b, enc, dec, h, d, layers = 4, 512, 128, 8, 64, 2
    rep = report(run)
    sites = {s["name"]: s for s in rep["sites"]}
    expect = {
        T5.format(0, "Self"): (enc, enc),
        T5.format(1, "Self"): (dec, dec),
        T5.format(1, "Cross"): (dec, enc),
    }
    assert set(sites) == set(expect)
    steps = profiler_steps(run)
    for name, (sq, sk) in expect.items():
        s = sites[name]
        assert s["layers"] == layers and s["calls"] == layers * steps, name
        # (eager T5's first layer computes the bias it adds, later layers add it as a tensor: the
        # mask label may differ between the layers, the geometry does not)
        for sh in s["shapes"]:
            assert (sh["b"], sh["h"], sh["sq"], sh["sk"], sh["d"]) == (b, h, sq, sk, d), name
    # every attention kernel belongs to one of them
    assert sum(s["share"] for s in rep["sites"]) == pytest.approx(1.0, abs=2e-3)


# -- sites: two kinds of attention ---------------------------------------------------------------
def _expected_bound(rep: dict, site: str, flops_per_call: float, bytes_per_call: float) -> tuple[str, float]:
    """The bound the roofline gives a site's forward fused kernels: their least DRAM traffic (q, k,
    v read and o written once) and their FLOPs at the recorded durations; ``latency`` when neither
    roof is reached at half (classify.ROOF_REACHED), else the roof reached. Returns (bound, share
    of the capping roof)."""
    peaks = rep["device"]["peaks"]
    rows = [k for k in site_rows(rep, site, "fused_attention") if k["direction"] == "forward" and k["flops"]]
    t = sum(k["dur_us"] for k in rows) * 1e-6
    n = len(rows)
    cu = n * flops_per_call / t / peaks["flops"]["bf16"]
    mu = n * bytes_per_call / t / peaks["memory_bandwidth"]
    if max(cu, mu) < 0.5:
        return "latency", max(cu, mu)
    return ("compute" if cu >= mu else "memory"), max(cu, mu)


def test_video_spatial_and_temporal_are_two_sites_each_with_its_bound():
    """twins.build_video: B 2, 16 frames of 256 patches, 8 heads of 64, 2 layers, fwd+bwd.
    Spatial attention: B·T = 32 sequences of N = 256; temporal: B·N = 512 sequences of T = 16.
    The same tokens (32·256 = 512·16), so the same bytes; FLOPs ∝ S², so intensity 16x apart:
    N/2 = 128 against T/2 = 8 FLOP/B (bf16), both left of the H200's ridge (989 TFLOP/s / 4.8 TB/s
    = 206): memory-side; at the recorded durations neither reaches half a roof."""
    rep = report("twins/video_spatial_temporal")
    sites = {s["name"]: s for s in rep["sites"]}
    spatial, temporal = "Sequential_0/VideoBlock_*/SpatialAttention_0", "Sequential_0/VideoBlock_*/TemporalAttention_0"
    assert set(sites) == {spatial, temporal}
    h, d = 8, 64
    shares = {}
    for name, (b, s) in ((spatial, (32, 256)), (temporal, (512, 16))):
        site = sites[name]
        sh = site["shapes"][0]
        assert (sh["b"], sh["h"], sh["sq"], sh["sk"], sh["d"], sh["mask"]) == (b, h, s, s, d, "none")
        assert site["calls"] == 2 * profiler_steps("twins/video_spatial_temporal") and site["layers"] == 2
        flops = 4.0 * b * h * s * s * d
        nbytes = 4.0 * b * h * s * d * 2
        bound, share = _expected_bound(rep, name, flops, nbytes)
        assert site["bound"] == bound, (name, site["bound"], bound, share)
        ridge = rep["device"]["peaks"]["flops"]["bf16"] / rep["device"]["peaks"]["memory_bandwidth"]
        assert flops / nbytes == pytest.approx(s / 2) and flops / nbytes < ridge
        assert site["roofline"]["side"] == "memory", name
        shares[name] = share
    # the math's intensities are 16x apart; the cost model's (with the softmax statistics and the
    # backward's helpers) keep that ratio, as both sites move the same tokens
    ratio = sites[spatial]["roofline"]["intensity"] / sites[temporal]["roofline"]["intensity"]
    assert ratio == pytest.approx(256 / 16, rel=0.05)
    # the temporal kernels (16-row sequences in 64-row tiles) reach a much smaller share of their roof
    assert shares[spatial] > 3 * shares[temporal]


@pytest.mark.parametrize("run", ["round3/r3_swin_fwd", "round3/r3_swin_fwdbwd"])
def test_swin_window_attention_site_and_its_bound(run):
    """One SwinBlock (round3_workloads.build_swin): one attention module, so one site — windows of
    7x7 = 49 tokens, B·(56/7)² windows, 4 heads of 32, the shift mask and the bias as tensors.
    Eager attention's QKᵀ of 49x49 scores per window: 2·49·32 FLOPs per score, 2·(49·32·2) bytes of
    q and k and 49·49·2 of scores per window-head: ~20 FLOP/B, far left of the ridge."""
    m = meta(run.split("/")[1])
    rep = report(run)
    assert len(rep["sites"]) == 1
    s = rep["sites"][0]
    assert s["name"] == "SwinBlock_0/SwinWindowAttention_0"
    sh = s["shapes"][0]
    windows = m["B"] * (m["resolution"] // m["window"]) ** 2
    assert (sh["b"], sh["h"], sh["sq"], sh["sk"], sh["d"]) == (windows, m["heads"], 49, 49, m["head_dim"])
    assert sh["mask"] == "mask tensor (contents not recorded)"
    n, dh = 49, m["head_dim"]
    qk_intensity = (2.0 * n * n * dh) / (2.0 * (2 * n * dh) + 2.0 * n * n)
    ridge = rep["device"]["peaks"]["flops"]["bf16"] / rep["device"]["peaks"]["memory_bandwidth"]
    assert qk_intensity < ridge / 5
    assert s["roofline"]["side"] == "memory" and s["roofline"]["intensity"] < ridge / 5
    assert s["bound"] in ("memory", "latency")


# -- the FLOPs ledger ---------------------------------------------------------------------------
def test_causal_flash_8192_useful_is_half_dense_plus_the_diagonal():
    """r3_flash_fwdbwd_s8192: flash, B 1, H 16, S 8192, D 128, causal, fwd+bwd."""
    m = meta("r3_flash_fwdbwd_s8192")
    b, h, s, d = m["B"], m["H"], m["q_len"], m["D"]
    led = report("round3/r3_flash_fwdbwd_s8192")["flops_ledger"]
    fwd = 4.0 * b * h * s * s * d  # QKᵀ and PV, every pair
    dense = fwd * 3  # forward + backward (2x: dV, dP, dQ, dK)
    useful = 4.0 * b * h * d * s * (s + 1) / 2 * 3  # query i sees i + 1 keys
    assert led["dense"] == pytest.approx(dense, rel=1e-3)
    assert led["useful"] == pytest.approx(useful, rel=1e-3)
    assert led["useful_exact"]
    assert useful < led["executed"] < dense * 2.5 / 2  # whole tiles, and the backward's recomputed QKᵀ
    for c in led["calls"]:
        assert c["useful"] < c["executed"] < c["dense"] * (1.25 if c["direction"] == "backward" else 1.0)
        assert c["executed_basis"].startswith("tiles ")
    for k, v in led["mfu"].items():
        assert v is None or 0 < v <= 1.0, k


@pytest.mark.parametrize("run", ["round3/r3_jagged_fwd", "round3/r3_jagged_fwdbwd"])
def test_jagged_sdpa_ledger_is_a_bound_that_brackets_the_truth(run):
    """Jagged SDPA over sequences of JAGGED_LENGTHS (the run's meta has them): the profiler records
    the packed total (14720), the count (9 offsets), the longest (3072) and — as the [512, 0]
    shape of the nested tensor's min_seqlen — the shortest, not the lengths, so the ledger gives
    bounds and says so; they must bracket Σᵢ 4·Lᵢ²·H·D (with the shortest: −8 % / +19 % of it)."""
    m = meta(run.split("/")[1])
    h, d = m["H"], m["D"]
    true_fwd = sum(4.0 * n * n * h * d for n in m["lengths"])
    assert true_fwd == pytest.approx(m["useful_flops_fwd"], rel=1e-9)
    led = report(run)["flops_ledger"]
    assert not led["useful_exact"] and led["estimated"]
    for c in led["calls"]:
        true = true_fwd * (2.0 if c["direction"] == "backward" else 1.0)
        assert c["shapes"]["lengths"] == "total_max" and not c["useful_exact"]
        assert c["shapes"]["shortest"] == min(m["lengths"]) and c["shapes"]["sq"] == max(m["lengths"])
        assert c["useful_low"] <= true <= c["useful"], (c["direction"], c["useful_low"], true, c["useful"])
        assert c["useful"] < 1.2 * true and c["useful_low"] > 0.9 * true  # the bounds of the recorded facts
        assert "upper bound" in c["executed_basis"]
    true_total = true_fwd * (3.0 if m["pass"] == "fwd+bwd" else 1.0)
    assert led["useful_low"] <= true_total <= led["useful"]


def test_bottom_right_causal_decode_counts_only_the_keys_each_query_sees():
    """r3_lower_right_decode: 4 queries against 4096 cached keys, causal_lower_right (dispatched to
    the flash op with is_causal=True, which aligns bottom-right): query i sees 4093 + i keys."""
    m = meta("r3_lower_right_decode")
    b, h, sq, sk, d = m["B"], m["H"], m["q_len"], m["kv_len"], m["D"]
    led = report("round3/r3_lower_right_decode")["flops_ledger"]
    (c,) = led["calls"]
    seen = sum(sk - sq + 1 + i for i in range(sq))
    assert c["mask"] == "causal (bottom-right)"
    assert c["useful"] == pytest.approx(4.0 * b * h * d * seen, rel=5e-4)
    assert c["dense"] == pytest.approx(4.0 * b * h * d * sq * sk, rel=5e-4)
    assert c["useful_exact"] and c["useful"] <= c["dense"]
    # top-left would keep 1 + 2 + 3 + 4 keys: a thousand times less
    assert c["useful"] > 100 * 4.0 * b * h * d * sum(range(1, sq + 1))


def test_flex_document_mask_without_block_counts_is_an_upper_bound():
    """r3_flex_doc_fwdbwd: FlexAttention, causal within 5 documents of one 4096-token row. The
    trace records the block mask's tensor shapes, not its counts (148 of 1024 blocks visited per
    the run's meta), so executed is the dense upper bound and the ledger says so; the useful
    count stays above the truth Σ 2·n·(n+1)·H·D·B and the MFU it would give above 100 % is
    withheld."""
    m = meta("r3_flex_doc_fwdbwd")
    led = report("round3/r3_flex_doc_fwdbwd")["flops_ledger"]
    assert not led["useful_exact"] and led["executed_upper_bound"]
    fwd = next(c for c in led["calls"] if c["direction"] == "forward")
    assert fwd["mask"] == "block mask" and fwd["executed_basis"] == "dense (block counts not recorded)"
    assert fwd["shapes"]["block"]["blocks"] == m["kv_blocks_dense"]
    assert fwd["useful"] >= m["useful_flops_fwd"]
    for c in led["calls"]:
        for v in c["mfu"].values():
            assert v is None or v <= 1.0


ALL_TRACES = sorted(
    os.path.relpath(os.path.dirname(f), os.path.join(ROOT, "tests", "data"))
    for f in glob.glob(os.path.join(ROOT, "tests", "data", "**", "*.pt.trace.json*"), recursive=True)
)


@pytest.mark.parametrize("run", sorted(set(ALL_TRACES)))
def test_mfu_never_above_100_percent(run):
    """No MFU or HFU figure above 1 on any recorded trace (per call, site, step and in total): a
    count that would exceed the roof is withheld and named in ``exceeds_peak``."""
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "data", run, "*.pt.trace.json*")))
    for f in files:
        led = analyze_path(f).get("flops_ledger")
        if not led:
            continue
        figures = [("total", led.get("mfu") or {})]
        figures += [(f"call {c['call']} {c['direction']}", c.get("mfu") or {}) for c in led.get("calls") or []]
        figures += [(f"site {s['site']}", s.get("mfu") or {}) for s in led.get("sites") or []]
        figures += [(f"step {s.get('name')}", s.get("mfu") or {}) for s in led.get("steps") or []]
        for where, mfu in figures:
            for basis, v in mfu.items():
                assert v is None or 0.0 <= v <= 1.0, (f, where, basis, v)
        hfu = (led.get("hfu") or {}).get("value")
        assert hfu is None or 0.0 <= hfu <= 1.0, (f, hfu)


# -- the FFN boundary against its torch.compile twin --------------------------------------------
def _boundary_roles(run: str) -> dict[str, dict]:
    return {r["role"]: r for r in report(run)["boundary"]["roles"]}


def test_ffn_boundary_add_norm_estimate_against_the_compiled_twin():
    """twins ffn_block_eager / ffn_block_compiled (FfnBoundaryBlock: B 2, S 2048, hidden 1024, bf16,
    fwd; pair ffn_boundary_compile). Inductor fused the residual add and the RMSNorm into one
    kernel (and neither the o_proj epilogue nor the GEMM prologue): the eager trace's add_norm
    estimate must be within 15 % of the twin's measured saving on the boundary, the eager add+norm
    kernels' time minus the compiled add+norm kernel's. validation/RESULTS-model.md has the figures
    and why the step did not get faster."""
    eager, comp = _boundary_roles("twins/ffn_block_eager"), _boundary_roles("twins/ffn_block_compiled")
    assert set(eager) == {"o_proj", "residual_add", "norm"} and set(comp) == {"o_proj", "add_norm"}
    b, s, e = 2, 2048, 1024
    y = b * s * e * 2  # one bf16 activation
    # the fused kernel reads y and the residual and writes the normalised copy (and the sum, unless
    # Inductor recomputes it where it is used again): 3 to 4 activations per call, 2 calls
    assert 2 * 3 * y * 0.99 <= comp["add_norm"]["bytes"] <= 2 * 4 * y * 1.01
    measured = eager["residual_add"]["time_us"] + eager["norm"]["time_us"] - comp["add_norm"]["time_us"]
    est = next(f for f in report("twins/ffn_block_eager")["boundary"]["fusions"] if f["id"] == "add_norm")
    assert est["removable_us"] == pytest.approx(eager["residual_add"]["time_us"] + eager["norm"]["time_us"])
    assert est["estimated_gain_us"] == pytest.approx(measured, rel=0.15), (est["estimated_gain_us"], measured)
    # o_proj is the same GEMM in both
    assert comp["o_proj"]["time_us"] == pytest.approx(eager["o_proj"]["time_us"], rel=0.1)
    # the twins' unprofiled steps (manifest): compile saved GPU kernel time but not step time
    with open(MANIFEST) as f:
        pair = json.load(f)["pairs"]["ffn_boundary_compile"]
    assert pair["measured_gpu_kernel_saving_ms_per_step"] > 0.1 and pair["measured_saving_ms_per_step"] < 0
    assert pair["problem"]["gpu_kernel_ms_per_step"] < 0.6 * pair["problem"]["step_ms_median"]  # host-bound


def test_t5_sites_stay_apart_in_a_narrow_text_table():
    """analyze's text Sites table cuts long names in the middle; the module path all sites share
    goes to the heading, so the part telling encoder from decoder and self from cross stays."""
    from tb_attention_plugin.formats import model_text

    lines = model_text(report("round3/r3_t5_eager_fwd"), markdown=False, width=100)
    assert lines[0] == "Attention sites (under T5Model_0/)"
    table = lines[1].splitlines()
    rows = table[2:]
    assert [r.split("/")[0] for r in rows] == ["T5Stack_0", "T5Stack_1", "T5Stack_1"]
    assert sum("rossAttention" in r for r in rows) == 1 and sum("SelfAttention" in r for r in rows) == 2
    assert all(len(x) <= 100 for x in table)


def test_hfu_counts_no_kernel_above_its_roof_and_says_when_it_is_a_bound():
    """HFU sums each costed kernel's time at the roof (FLOPs / peak), at most its own time: the
    Flex document-mask trace's executed count is the dense upper bound (148 of 1024 blocks
    visited), which would put its forward kernel at 1.4x the roof."""
    rep = report("round3/r3_flex_doc_fwdbwd")
    hfu = rep["flops_ledger"]["hfu"]
    assert hfu["upper_bound"]
    costed = [k for k in rep["kernels"] if k["flops"] and k["peak_flops_per_s"]]
    assert hfu["roof_time_us"] <= sum(k["dur_us"] for k in costed) + 1e-6
    fwd = next(c for c in rep["flops_ledger"]["calls"] if c["direction"] == "forward")
    assert fwd["executed"] / (fwd["time_us"] * 1e-6) > fwd["peak_flops_per_s"]  # the bound is above the roof
    # exact counts: no flag
    assert "upper_bound" not in report("round3/r3_flash_fwdbwd_s8192")["flops_ledger"]["hfu"]


# -- executed FLOPs against the hardware's count -------------------------------------------------
NCU = os.path.join(ROOT, "validation", "round3", "2026-12-01", "ncu")
TENSOR_OPS = (
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp16.sum",
    "sm__ops_path_tensor_src_fp8.sum",
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
)
# the fused attention kernels of the ncu rows (names as Nsight Compute demangles them)
ATTENTION_KERNEL = ("flash_fwd", "flash_bwd", "fmha_cutlass", "_sdpa_", "flex_attention")


def ncu_attention_tensor_ops(run: str) -> float:
    with open(os.path.join(NCU, f"{run}.json")) as f:
        rows = json.load(f)["kernels"]
    return sum(
        sum(k.get(m) or 0 for m in TENSOR_OPS)
        for k in rows
        if any(p in str(k.get("Kernel Name") or "") for p in ATTENTION_KERNEL)
    )


@pytest.mark.parametrize(
    "run",
    [
        "r3_flash_fwdbwd_s8192",  # causal prefill: whole tiles of kept pairs, the backward's 5 matmuls
        "r3_cudnn_fwd_s4096",
        "r3_cudnn_fwdbwd_s4096",  # the backward's tile is the backend's default (an estimate)
        "r3_efficient_block_fwdbwd",
        "r3_swa_sdpa_fwd",  # cuDNN with a bool mask: every tile
        "r3_lower_right_decode",  # 4 queries in 128-row tiles: 32x the pairs
        "r3_splitkv_decode_gqa",  # 1 token, 4 query heads per K/V head packed into 64-row tiles
        "r3_decode_compiled",  # cuDNN decode, the same packing in 16-row tiles
    ],
)
def test_executed_flops_match_the_tensor_cores_count(run):
    """Nsight Compute counted the Tensor Cores' operations of every attention kernel
    (sm__ops_path_tensor_*, validation/round3/2026-12-01/ncu): the ledger's executed count is
    that, within 2 % (the tile sizes of cuDNN's backward and CUTLASS's causal skipping are
    estimates)."""
    hw = ncu_attention_tensor_ops(run)
    led = report(f"round3/{run}")["flops_ledger"]
    assert hw > 0 and not led["executed_upper_bound"]
    assert led["executed"] == pytest.approx(hw, rel=0.02), (led["executed"], hw)


@pytest.mark.parametrize("run", ["r3_jagged_fwd", "r3_jagged_fwdbwd", "r3_flex_doc_fwdbwd"])
def test_executed_upper_bounds_hold_against_the_tensor_cores_count(run):
    """Where the trace lacks the lengths (jagged) or the block counts (Flex), executed is an
    upper bound: the hardware's count is below it — and for Flex equals the block counts of the
    run's mask (148 visited 128x128 blocks per batch·head; backward 3.5x the forward)."""
    hw = ncu_attention_tensor_ops(run)
    led = report(f"round3/{run}")["flops_ledger"]
    assert led["executed_upper_bound"] and hw <= led["executed"] * 1.001
    if run == "r3_flex_doc_fwdbwd":
        m = meta(run)
        visited = m["kv_blocks_partial"] + m["kv_blocks_full"]
        fwd = visited * 128 * 128 * m["B"] * m["H"] * 4 * m["D"]
        assert hw == pytest.approx(fwd * (1 + 3.5), rel=1e-3)


def annotated_flex_trace(tmp_path, name: str) -> str:
    """r3_flex_doc_fwdbwd with one ``record_function(name)`` around each compiled Flex forward —
    the range the flex_blocks convention puts there (validation/round4_model.py records it on the
    device): a user_annotation enclosing the call's Torch-Compiled Region on its thread."""
    with gzip.open(trace_file("round3/r3_flex_doc_fwdbwd"), "rt") as f:
        d = json.load(f)
    ev = d["traceEvents"]
    regions = [e for e in ev if str(e.get("name", "")).startswith("Torch-Compiled Region") and e.get("ph") == "X"]
    added = []
    for op in (e for e in ev if e.get("cat") == "cpu_op" and e["name"] == "triton_tem_fused_flex_attention_0"):
        r = max(
            (x for x in regions if x["tid"] == op["tid"] and x["ts"] <= op["ts"] and x["ts"] + x["dur"] >= op["ts"]),
            key=lambda x: x["ts"],
        )
        added.append(
            dict(ph="X", cat="user_annotation", name=name, pid=r["pid"], tid=r["tid"], ts=r["ts"] - 0.5,
                 dur=r["dur"] + 1.0, args={"External id": 10**6 + len(added)})
        )  # fmt: skip
    assert added
    out = tmp_path / "flex_annotated.pt.trace.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(dict(d, traceEvents=ev + added), f)
    return str(out)


def test_flex_block_counts_from_the_annotation_match_the_tensor_cores_count(tmp_path):
    """With the run's block counts in a ``flex_blocks:`` annotation (32 partial + 116 full blocks
    of 1024, per the run's meta), executed comes from them — the Tensor Cores' count exactly
    (forward 148 blocks, backward 3.5x) — no longer a bound; useful brackets the truth between
    the full blocks and all visited blocks; the MFU withheld without the counts is given."""
    m = meta("r3_flex_doc_fwdbwd")
    p, f = m["kv_blocks_partial"], m["kv_blocks_full"]
    tag = f"flex_blocks:partial={p},full={f},mask_bh=1x1,q_blocks=32,kv_blocks=32,block=128x128"
    rep = analyze_path(annotated_flex_trace(tmp_path, tag))
    assert rep["status"] == "ok"
    led = rep["flops_ledger"]
    assert not led["executed_upper_bound"] and not led["useful_exact"]
    assert led["executed"] == pytest.approx(ncu_attention_tensor_ops("r3_flex_doc_fwdbwd"), rel=0.002)
    fwd = next(c for c in led["calls"] if c["direction"] == "forward")
    assert fwd["executed_basis"] == "block counts"
    assert fwd["shapes"]["block"]["visited"] == p + f and fwd["shapes"]["block"]["source"] == "flex_blocks annotation"
    assert fwd["useful_low"] <= m["useful_flops_fwd"] <= fwd["useful"]
    assert fwd["mfu"]["executed"] is not None and 0 < fwd["mfu"]["executed"] <= 1
    assert [s["name"] for s in rep["sites"]] == ["DocumentFlexAttention_0"]  # the annotation is no scope
    # an annotation of another grid than the call's is not used
    rep = analyze_path(annotated_flex_trace(tmp_path, tag.replace("q_blocks=32", "q_blocks=16")))
    assert rep["flops_ledger"]["executed_upper_bound"]


def test_fp8_gemms_are_measured_on_the_fp8_roof():
    """modern/fp8_attn_fwd (validation/modern_workloads.py): q/k/v/o projections as e4m3
    torch._scaled_mm, cuDNN attention in bf16. The HFU's per-roof breakdown puts the four FP8 GEMMs
    on the H200's measured e4m3 roof (1467 TFLOP/s), their FLOPs the Tensor Cores' fp8 count
    (Nsight Compute, validation/modern/2026-12-01/ncu), their utilisation FLOPs / (time x that roof)
    from the trace's own durations — never bf16's roof, and never above 1."""
    rep = report("modern/fp8_attn_fwd")
    with gzip.open(os.path.join(ROOT, "validation", "modern", "2026-12-01", "ncu", "fp8_attn_fwd.json.gz"), "rt") as f:
        ncu_rows = json.load(f)["kernels"]
    hw_fp8 = sum(k.get("sm__ops_path_tensor_src_fp8.sum") or 0 for k in ncu_rows)
    gemms = [k for k in rep["kernels"] if k.get("op") == "aten::_scaled_mm" and k["kind"] == "kernel"]
    assert len(gemms) == 4 and {k["peak"] for k in gemms} == {"fp8"}
    hfu = rep["flops_ledger"]["hfu"]
    fp8 = hfu["by_roof"]["fp8"]
    assert fp8["peak_flops_per_s"] == pytest.approx(1467e12) == rep["device"]["peaks"]["flops"]["fp8"]
    assert fp8["kernels"] == 4 and fp8["flops"] == pytest.approx(hw_fp8, rel=1e-3)
    t = sum(k["dur_us"] for k in gemms)
    assert fp8["time_us"] == pytest.approx(t, rel=1e-3)
    assert fp8["utilization"] == pytest.approx(hw_fp8 / (1467e12 * t * 1e-6), rel=2e-3)
    assert 0 < fp8["utilization"] <= 1
    assert sum(r["roof_time_us"] for r in hfu["by_roof"].values()) == pytest.approx(hfu["roof_time_us"], rel=1e-3)
    assert all(r["utilization"] is None or r["utilization"] <= 1 for r in hfu["by_roof"].values())


# -- round 4 (validation/round4_model.py, recorded 2026-12-02: tests/data/round4, validation/round4) ---
R4 = os.path.join(ROOT, "validation", "round4", "2026-12-02")


def r4_meta(w: str) -> dict:
    with open(os.path.join(R4, "meta", f"{w}.json")) as f:
        m = json.load(f)
    assert m["status"] == "ok", (w, m.get("error"))
    return m


def r4(w: str) -> dict:
    return report(f"round4/{w}")


def test_ffn_boundary_on_a_gpu_bound_step():
    """FfnBoundaryBlock at B 8, S 4096: the eager step's kernels fill it (GPU-bound), so the GPU time
    torch.compile removes comes off the step (CUDA events, unprofiled) — unlike the host-bound twin at
    B 2, S 2048 (2026-12-01). The add+norm estimate of the eager trace holds against the compiled
    twin's traces, and it is part of (at most) what the step saved."""
    e, c = r4_meta("ffn_block_b8_s4096_eager"), r4_meta("ffn_block_b8_s4096_compiled")
    assert e["gpu_kernel_ms_per_step"] / e["step_ms_median"] > 0.95  # GPU-bound
    kernel_saving = e["gpu_kernel_ms_per_step"] - c["gpu_kernel_ms_per_step"]
    step_saving = e["step_ms_median"] - c["step_ms_median"]
    assert 0.85 < step_saving / kernel_saving <= 1.05
    re_, rc = r4("ffn_block_b8_s4096_eager"), r4("ffn_block_b8_s4096_compiled")
    steps = len(re_["steps"])
    er = {r["role"]: r for r in re_["boundary"]["roles"]}
    cr = {r["role"]: r for r in rc["boundary"]["roles"]}
    measured = (er["residual_add"]["time_us"] + er["norm"]["time_us"] - cr["add_norm"]["time_us"]) / steps
    est = next(f for f in re_["boundary"]["fusions"] if f["id"] == "add_norm")["estimated_gain_us"] / steps
    assert est / measured == pytest.approx(1.0, abs=0.1)
    assert est <= step_saving * 1e3


def test_ffn_boundary_twin_under_cuda_graphs_is_gpu_bound_too():
    """At the twin's own size the host left the step once it is one CUDA graph: eager replayed as a
    graph fills 90 % of its step with kernels (the plain eager step: ~60 %)."""
    g, p = r4_meta("ffn_block_b2_s2048_eager_cudagraph"), r4_meta("ffn_block_b2_s2048_eager")
    assert g["gpu_kernel_ms_per_step"] / g["step_ms_median"] > 0.9
    assert p["gpu_kernel_ms_per_step"] / p["step_ms_median"] < 0.75
    cg = r4_meta("ffn_block_b2_s2048_compiled_cudagraph")
    assert cg["step_ms_median"] < g["step_ms_median"]


@pytest.mark.parametrize("w", ["jagged_build_nt_fwd", "jagged_build_nt_fwdbwd", "jagged_build_asnt_fwd"])
def test_jagged_built_in_the_step_is_exact(w):
    """The nested tensor built from its pieces inside the profiled step: the pieces' shapes are in
    the trace (aten::cat), so every call has its per-sequence lengths and useful is Σᵢ 4·Lᵢ²·H·D
    (x3 with the backward) — within 1 %, and marked exact."""
    m = r4_meta(w)
    led = r4(w)["flops_ledger"]
    assert led["useful_exact"] and not led["executed_upper_bound"]
    assert {c["shapes"]["lengths"] for c in led["calls"]} == {"per_sequence"}
    steps = m["active_steps"]
    true = m["useful_flops_fwd"] * (3 if m["pass_"] == "fwd+bwd" else 1) * steps
    assert led["useful"] == pytest.approx(true, rel=0.01)


def test_flex_block_counts_recorded_by_the_annotation():
    """flex_doc_fwdbwd_annotated carries the mask's counts in a record_function (the convention of
    roofline/ledger.py): executed comes from the 148 visited blocks — the Tensor Cores' count of the
    same mask in round 3 (Nsight Compute) — per call; the useful bounds bracket the truth. Without
    the annotation (the mask built in the step) the trace holds no counts: still the dense bound."""
    m = r4_meta("flex_doc_fwdbwd_annotated")
    led = r4("flex_doc_fwdbwd_annotated")["flops_ledger"]
    assert not led["executed_upper_bound"] and {"useful", "executed"}.isdisjoint(led.get("exceeds_peak") or [])
    fwd = [c for c in led["calls"] if c["direction"] == "forward"]
    assert fwd and all(c["executed_basis"] == "block counts" for c in led["calls"])
    per_call = m["blocks_visited_per_call"] * 128 * 128 * 4 * m["D"] * (1 + 3.5)
    assert led["executed"] / len(fwd) == pytest.approx(per_call, rel=1e-3)
    assert led["executed"] / len(fwd) == pytest.approx(ncu_attention_tensor_ops("r3_flex_doc_fwdbwd"), rel=2e-3)
    for c in fwd:
        assert c["useful_low"] <= m["useful_flops_fwd"] <= c["useful"]
    plain = r4("flex_doc_fwdbwd_mask_in_step")["flops_ledger"]
    assert plain["executed_upper_bound"]


def test_fp8_block_projections_on_the_fp8_roof():
    """The FP8 block (seven e4m3 _scaled_mm projections, bf16 flash attention): the projections' FLOPs
    are the meta's 2·M·N·K per step, all on the fp8 roof, at most 100 % of it; the bf16 twin has no fp8
    kernel and its GEMMs sit on the bf16 roof."""
    m = r4_meta("fp8_block_fwd_e4m3")
    hfu = r4("fp8_block_fwd_e4m3")["flops_ledger"]["hfu"]
    fp8 = hfu["by_roof"]["fp8"]
    assert fp8["kernels"] == 7 * m["active_steps"]
    assert fp8["flops"] == pytest.approx(m["matmul_flops"] * m["active_steps"], rel=1e-3)
    assert fp8["peak_flops_per_s"] == pytest.approx(m["roof_e4m3_scaled_mm_tflops_measured"] * 1e12)
    assert 0.5 < fp8["utilization"] <= 1
    twin = r4("fp8_block_fwd_bf16")["flops_ledger"]["hfu"]["by_roof"]
    assert "fp8" not in twin and twin["bf16"]["utilization"] <= 1


def test_fp8_flex_attention_on_the_fp8_roof():
    """Flex on e4m3 q/k/v (no block mask): its template is costed (Inductor passes Vᵀ), on the fp8
    roof, its MFU at most 1; SDPA refused e4m3 inputs on torch 2.11 (the probe's error is kept)."""
    led = r4("fp8_attn_flex_e4m3")["flops_ledger"]
    (c, *_) = led["calls"]
    assert c["backend"] == "flex" and c["peak_flops_per_s"] == pytest.approx(1467e12)
    m = r4_meta("fp8_attn_flex_e4m3")
    assert c["executed"] == pytest.approx(m["flops_dense"], rel=1e-3)  # the report keeps 4 significant digits
    assert 0 < c["mfu"]["executed"] <= 1
    with open(os.path.join(R4, "meta", "fp8_attn_sdpa_e4m3.json")) as f:
        assert "Float8_e4m3fn" in json.load(f)["error"]


def r4_ncu_rows() -> dict[str, list[dict]]:
    from tb_attention_plugin.roofline import ncu

    table = ncu.read(os.path.join(R4, "ncu", "r4.csv"))
    col = ncu.nvtx_column(table.columns)
    out: dict[str, list[dict]] = {}
    for r in table.rows:
        cell = str(r.get(col) or "")
        hits = [w for w in R4_NCU if w in cell]
        if hits:
            out.setdefault(max(hits, key=len), []).append(r)
    return out


R4_NCU = [f"ncu_{b}_{s}" for s in ("decode_k4000", "prefill_k4000", "temporal16") for b in ("flash", "cudnn")]


@pytest.mark.parametrize("w", R4_NCU)
def test_executed_flops_where_the_key_length_is_not_a_multiple_of_the_tile(w):
    """Nsight Compute's tensor-op counts of flash and cuDNN calls over 4000 keys (decode, prefill)
    and of the video twin's 16-frame temporal attention: the ledger's executed count (whole tiles;
    cuDNN's sm90 forward in 128-row query blocks) matches the hardware within 0.2 %."""
    rows = r4_ncu_rows()[w]
    hw = sum(sum(float(k.get(x) or 0) for x in TENSOR_OPS) for k in rows)
    led = r4(w)["flops_ledger"]
    per_call = led["executed"] / len([c for c in led["calls"] if c["direction"] == "forward"])
    assert hw > 0 and per_call == pytest.approx(hw, rel=2e-3), (per_call, hw)
