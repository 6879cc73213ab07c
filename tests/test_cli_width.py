"""Text output fits the terminal (issue #15): COLUMNS, else the terminal, else 100 columns;
``--wide`` prints everything. Also the CLI's other text habits: ``analyse`` is accepted, one
minus sign, ``~`` on estimates, annotate's files readable like any other file."""

import os
import stat
import subprocess
import sys

import pytest

from helpers import ROOT, SAMPLES, sample
from tb_attention_plugin.cli import main
from tb_attention_plugin.formats import MINUS, cut_middle, est, signed_pct, signed_us, text_table

TRACES = sorted(
    os.path.join(d, f)
    for d, _, fs in os.walk(SAMPLES)
    for f in fs
    if f.endswith((".pt.trace.json.gz", ".pt.trace.json")) or f == "attention_trace.json"
)
MEMORY_TRACES = sorted(
    os.path.join(ROOT, "tests", "data", "memory", "h200", f)
    for f in os.listdir(os.path.join(ROOT, "tests", "data", "memory", "h200"))
    if f.endswith(".json.gz")
)
# the forms of issue #12 (flex "≤" bounds, FP8, MLA/MoE, CUDA-graph replay with its notice)
MODERN = os.path.join(ROOT, "tests", "data", "modern")
MODERN_TRACES = sorted(
    os.path.join(MODERN, d, f)
    for d in os.listdir(MODERN)
    for f in os.listdir(os.path.join(MODERN, d))
    if f.endswith(".pt.trace.json.gz")
)
PAIRS = [
    ("sdpa_flash_s2048_fwd", "naive_bf16_s2048_fwd"),
    ("gpt4l_naive_train", "gpt4l_sdpa_train"),
    ("sdpa_math_s2048_fwd", "sdpa_efficient_s2048_fwd"),
    ("validation/hf_llama_eager_fwdbwd", "validation/hf_llama_sdpa_fwdbwd"),
]


def run(args, capsys, columns=None, monkeypatch=None):
    if columns is not None:
        monkeypatch.setenv("COLUMNS", str(columns))
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def too_long(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


@pytest.mark.parametrize("path", TRACES + MEMORY_TRACES + MODERN_TRACES, ids=lambda p: os.path.relpath(p, ROOT))
def test_analyze_with_memory_fits_100_columns(path, capsys, monkeypatch):
    code, out, err = run(["analyze", path, "--memory", "--no-cache"], capsys, 100, monkeypatch)
    assert code == 0 and err == ""
    assert "Memory and data movement" in out
    assert too_long(out, 100) == []


def test_replay_with_reference_fits_100_columns(capsys, monkeypatch):
    replay, eager = (
        next(p for p in MODERN_TRACES if f"{os.sep}{d}{os.sep}" in p)
        for d in ("decode_graph_replay", "decode_graph_eager")
    )
    code, out, err = run(["analyze", replay, "--reference", eager, "--memory", "--no-cache"], capsys, 100, monkeypatch)
    assert code == 0 and err == "" and too_long(out, 100) == []


@pytest.mark.parametrize("base,new", PAIRS)
def test_compare_fits_100_and_80_columns(base, new, capsys, monkeypatch):
    for width in (100, 80):
        code, out, _ = run(
            ["compare", os.path.join(SAMPLES, base), os.path.join(SAMPLES, new), "--no-cache"],
            capsys,
            width,
            monkeypatch,
        )
        assert code == 0 and "Attention comparison" in out
        assert too_long(out, width) == [], width


def test_devices_fits_and_wide_does_not_cut(capsys, monkeypatch):
    code, out, _ = run(["devices"], capsys, 100, monkeypatch)
    assert code == 0 and too_long(out, 100) == []
    code, wide, _ = run(["devices", "--wide"], capsys, 100, monkeypatch)
    assert too_long(wide, 100)  # the one-line-per-entry form
    assert " ".join(out.split()) == " ".join(wide.split())  # same words, only wrapped


def test_the_default_is_100_columns_when_not_a_terminal():
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tb_attention_plugin.cli",
            "analyze",
            "--no-cache",
            "--memory",
            sample("gpt4l_naive_train"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert too_long(r.stdout, 100) == []
    assert max(len(line) for line in r.stdout.splitlines()) > 90  # it uses the room it has


def test_narrower_and_wider_terminals(capsys, monkeypatch):
    path = sample("naive_bf16_s2048_fwd")
    _, out80, _ = run(["analyze", path, "--memory", "--no-cache"], capsys, 80, monkeypatch)
    assert too_long(out80, 80) == []
    _, out40, _ = run(["analyze", path, "--no-cache"], capsys, 40, monkeypatch)
    assert too_long(out40, 80) == []  # never narrower than 80
    _, out200, _ = run(["analyze", path, "--no-cache"], capsys, 200, monkeypatch)
    assert "memory-bandwidth utilization  compute utilization" in out200  # room: one header line


def test_wide_prints_whole_names_and_every_column(capsys, monkeypatch):
    path = sample("naive_bf16_s2048_fwd")
    _, narrow, _ = run(["analyze", path, "--no-cache"], capsys, 100, monkeypatch)
    _, wide, _ = run(["analyze", path, "--no-cache", "--wide"], capsys, 100, monkeypatch)
    long_name = (
        "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 11, false, false>"
    )
    assert long_name in wide and long_name not in narrow
    assert "…" in narrow and "…" not in wide
    assert "memory-bandwidth utilization  compute utilization  kernels  share of attention" in wide
    assert not [line for line in wide.splitlines() if line != line.rstrip()]  # no trailing blanks


def test_analyse_is_accepted(capsys, monkeypatch):
    code, out, err = run(["analyse", sample("sdpa_flash_s2048_fwd"), "--no-cache"], capsys, 100, monkeypatch)
    assert code == 0 and err == "" and "fused attention" in out


def test_one_minus_sign(capsys, monkeypatch):
    code, out, _ = run(
        ["compare", sample("gpt4l_naive_train"), sample("gpt4l_sdpa_train"), "--no-cache"], capsys, 100, monkeypatch
    )
    assert code == 0
    assert "\u2212" not in out
    assert f"{MINUS}83.8%" in out and f"{MINUS}41.2 pt" in out
    assert signed_us(-1500.0) == f"{MINUS}1.50 ms" and signed_us(0.0) == "±0.0 µs" and signed_us(2.0) == "+2.0 µs"
    assert signed_pct(-5.04) == f"{MINUS}5.0%" and signed_pct(float("inf")) == "+∞%"


def test_estimates_are_marked(capsys, monkeypatch):
    code, out, _ = run(["analyze", sample("naive_bf16_s2048_fwd"), "--no-cache"], capsys, 100, monkeypatch)
    softmax = next(line for line in out.splitlines() if line.startswith("softmax "))
    qkv = next(line for line in out.splitlines() if line.startswith("QKV projection "))
    assert "~" in softmax and "~" not in qkv  # per-element estimate vs matmul from shapes
    assert est("1.5%", True) == "~1.5%" and est("1.5%", False) == "1.5%" and est("–", True) == "–"


def test_text_table_gives_way_in_order():
    headers = ["name", "a", "b", "long header words"]
    rows = [["x" * 50, "1", "22", "333"], ["short", "4", "55", "6"]]
    full = text_table(headers, rows, False)
    assert max(map(len, full.splitlines())) == 50 + 2 + 1 + 2 + 2 + 2 + 17
    t = text_table(headers, rows, False, width=70, cut=(0,), drop=(1,))
    assert max(map(len, t.splitlines())) == 70 and "x" * 50 in t  # first the header goes over two lines
    assert t.splitlines()[0].split() == ["long", "header"]
    t = text_table(headers, rows, False, width=60, cut=(0,), drop=(1,))
    assert max(map(len, t.splitlines())) <= 60 and "x" * 50 not in t and "…" in t  # then the name is cut
    assert t.splitlines()[1].split() == ["name", "a", "b", "words"]
    t = text_table(headers, rows, False, width=38, cut=(0,), drop=(1,))
    assert max(map(len, t.splitlines())) <= 38 and t.splitlines()[-4].split() == ["name", "b", "words"]  # a goes
    t = text_table(headers, rows, False, width=30, cut=(0,), drop=(1,))
    assert max(map(len, t.splitlines())) <= 30 and "a" in t.splitlines()[-4].split()  # names cut harder instead
    assert text_table(headers, rows, True, width=20).count("x" * 50) == 1  # markdown is never cut


def test_cut_middle():
    assert cut_middle("abcdefghij", 5) == "ab…ij" and cut_middle("abc", 5) == "abc"
    assert cut_middle("abc", None) == "abc"
    assert len(cut_middle("x" * 100, 24)) == 24


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600)])
def test_annotate_writes_files_like_any_program(umask, mode, tmp_path, capsys):
    out = tmp_path / "a.json.gz"
    old = os.umask(umask)
    try:
        code = main(["annotate", sample("sdpa_flash_s2048_fwd"), "-o", str(out), "--no-cache"])
    finally:
        os.umask(old)
    capsys.readouterr()
    assert code == 0
    assert stat.S_IMODE(os.stat(out).st_mode) == mode
    assert [p.name for p in tmp_path.iterdir()] == ["a.json.gz"]  # no temporary left behind


def test_the_cli_says_the_step_and_attentions_share_of_it_at_80_columns(capsys, monkeypatch):
    """Issue #41: the step time, GPU busy and idle, attention's share of the step and per-step gains,
    on the same basis as the tab's strip (steps.per_step)."""
    from helpers import sample
    from tb_attention_plugin.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["analyze", sample("gpt4l_sdpa_train")]) == 0
    out = capsys.readouterr().out
    assert "step 21.87 ms (mean of 2 profiled steps): GPU busy 8.16 ms, idle 13.70 ms" in " ".join(out.split())
    assert "attention 1.74 ms, 8.0% of the step" in " ".join(out.split())
    assert "over the 2 profiled steps: GPU time" in " ".join(out.split())
    assert all(len(line) <= 80 for line in out.splitlines())
    assert ", per step: ~" in out


# Kernel names as PyTorch's TensorIterator loops name them (abridged from a recorded H200 trace).
_COPY = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1},"
    " std::array<char*, 2ul>, 4,"
    " TrivialOffsetCalculator<1, unsigned int> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&))"
)
_MUL = (
    "void at::native::vectorized_elementwise_kernel<8, at::native::BUnaryFunctor<c10::BFloat16, c10::BFloat16,"
    " c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int,"
    " at::native::BUnaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16,"
    " at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)"
)
_FILL = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous"
    " namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::"
    "{lambda(c10::BFloat16, bool)#1}>(at::TensorIteratorBase&, at::native::(anonymous namespace)::masked_fill_kernel"
    "(at::TensorIterator&, c10::Scalar const&)::{lambda()#1})::{lambda(int)#1}>(int, int)"
)
_SCALE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::masked_scale_kernel<bool,"
    " float, float>(at::Tensor&, at::Tensor const&, at::Tensor const&, float)::{lambda(float, bool)#1},"
    " std::array<char*, 3ul> >(int, float)"
)


def test_template_hint_names_what_the_loop_computes():
    from tb_attention_plugin.formats import kernel_template_hint

    assert kernel_template_hint(_COPY) == "direct_copy_kernel_cuda"
    assert kernel_template_hint(_MUL) == "BUnaryFunctor<MulFunctor>"
    assert kernel_template_hint(_FILL) == "masked_fill_kernel"
    assert kernel_template_hint(_SCALE) == "masked_scale_kernel"
    assert kernel_template_hint("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") is None
    assert kernel_template_hint("void cutlass::Kernel<cutlass_80_tensorop_gemm>(Params)") == "cutlass_80_tensorop_gemm"


def test_names_that_would_read_the_same_keep_what_tells_them_apart():
    from tb_attention_plugin.formats import distinct_short_names, short_kernel_name

    shown = distinct_short_names([_MUL, _SCALE, "softmax_warp_forward", _COPY])
    assert shown[0] == "vectorized_elementwise_kernel<BUnaryFunctor<MulFunctor>>"
    assert shown[1] == "vectorized_elementwise_kernel<masked_scale_kernel>"
    # a name no other shortens to stays as short_kernel_name gives it
    assert shown[2] == "softmax_warp_forward" and shown[3] == short_kernel_name(_COPY)
    # the same kernel twice (forward and backward rows) is one name: nothing to tell apart
    assert distinct_short_names([_COPY, _COPY]) == [short_kernel_name(_COPY)] * 2


def test_markdown_is_never_cut_and_names_kernels_as_the_terminal_does(capsys, monkeypatch):
    _, out, _ = run(["analyze", "-f", "markdown", sample("gpt4l_naive_train")], capsys, 80, monkeypatch)
    table = out[out.index("### Top attention kernels") :].split("\n\n")[0]
    cells = [line.split(" | ")[0].lstrip("| ") for line in table.splitlines()[3:]]
    assert cells and not any("…" in c or "(" in c for c in cells)  # whole short names, no parameter lists
    assert any(c.startswith("vectorized_elementwise_kernel<") for c in cells)  # alike names told apart
    assert max(len(line) for line in out.splitlines()) > 100  # prose is not wrapped to the terminal
    _, wide, _ = run(["analyze", "-f", "markdown", "--wide", sample("gpt4l_naive_train")], capsys, 80, monkeypatch)
    assert "at::TensorIteratorBase&" in wide  # --wide: the whole names
