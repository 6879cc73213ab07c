"""Safe advice: is_causal=True is proposed only for a mask the trace shows is the causal one, the same
for every sequence (advice/equivalence.py); snippets keep the call's mask."""

from synth import BF16, SynthTrace
from tb_attention_plugin.advice.equivalence import mask_facts, sdpa_line
from tb_attention_plugin.trace.records import load_trace
from tb_attention_plugin.trace.shapes import SignatureArgs


class _Run:
    """What mask_facts reads of an analysis run: the trace and each op's recorded inputs."""

    def __init__(self, path):
        self.trace = load_trace(path)
        self._args = SignatureArgs(self.trace.signatures)
        self._mask_builders = None

    def op_args(self, r):
        return self._args(int(self.trace.ranges["sig"][r])) or []


def _facts(tmp_path, build, sq=512, sk=512, mask_shape=(8, 1, 512, 512)):
    t = SynthTrace()
    build(t)
    return mask_facts(_Run(t.write(tmp_path / "m.json")), sq, sk, mask_shape)


def test_an_encoders_padding_mask_is_not_causal(tmp_path):
    """BERT: attention_mask [B, S] expanded to [B, 1, 1, S]: score-shaped once broadcast, never causal."""

    def bert(t):
        with t.function("transformers/modeling_attn_mask_utils.py(430): _prepare_4d_attention_mask"):
            with t.op("aten::expand", dims=[[8, 1, 1, 512], []], types=["long int", ""]):
                pass

    f = _facts(tmp_path, bert)
    assert not f.causal and "padding" in f.reason


def test_a_causal_mask_built_from_positions_is_shown(tmp_path):
    def decoder(t):
        with t.op("aten::le", dims=[[1, 1, 1, 512], [1, 1, 512, 1]], types=["long int"] * 2):
            pass

    f = _facts(tmp_path, decoder)
    assert f.causal and "aten::le" in f.reason
    g = _facts(tmp_path, lambda t: t.op("aten::triu", dims=[[512, 512], []], types=[BF16, ""]).__enter__())
    assert g.causal and "triu" in g.reason


def test_a_causal_mask_with_key_padding_folded_in_is_not_causal(tmp_path):
    def padded_decoder(t):
        with t.op("aten::le", dims=[[1, 1, 1, 512], [1, 1, 512, 1]], types=["long int"] * 2):
            pass
        with t.op("aten::__and__", dims=[[8, 1, 512, 512], [8, 1, 1, 512]], types=["bool"] * 2):
            pass

    f = _facts(tmp_path, padded_decoder)
    assert not f.causal and "per-sequence" in f.reason


def test_nothing_shown_is_not_causal_and_a_cache_is_never(tmp_path):
    f = _facts(tmp_path, lambda t: None)
    assert not f.causal and "nothing in the trace" in f.reason
    assert not _facts(tmp_path, lambda t: None, sq=1, sk=512).causal


def test_fix_lines_keep_the_mask():
    assert sdpa_line("tensor") == "out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"
    assert "is_causal=True" in sdpa_line("causal", gqa=True) and "enable_gqa=True" in sdpa_line("causal", gqa=True)
    assert "attn_mask=mask.to(torch.bfloat16)" in sdpa_line("tensor", mask_cast="bf16")


def test_the_math_fallback_fix_keeps_the_bias(tmp_path):
    """T5 on SDPA: a float position bias passed as attn_mask sends it to math; the fix casts the
    bias and keeps it (never is_causal=True in its place)."""
    from synth import F32
    from synth_sdpa import sdpa_call
    from tb_attention_plugin.analyze import analyze_path

    t = SynthTrace()
    with t.module("T5Attention_0"):
        sdpa_call(t, backend="math", b=4, h=8, hk=8, sq=512, sk=512, d=64, dtype=F32, mask=True, dur=800.0)
    rep = analyze_path(t.write(tmp_path / "t5.pt.trace.json"))
    f = next(a for a in rep["advice"] if a["id"] == "sdpa_math_backend")
    assert "attn_mask=mask" in f["fix_code"] and "is_causal" not in f["fix_code"]
    assert "enable_gqa" not in f["fix_code"] and "q.to(torch.bfloat16)" in f["fix_code"]
