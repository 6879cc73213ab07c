"""Naming attention sites: repeated layers fold, distinct siblings stay apart."""

from tb_attention_plugin.attention.sites import CallPlace, fold_module_paths, fold_numbers, name_sites

SELF, CROSS = "sdpa q[2,8,64,64] k[2,8,64,64]", "sdpa q[2,8,16,64] k[2,8,64,64]"


def p(s):
    return tuple(s.split("/"))


def test_llama_layers_fold_to_one_site():
    paths = [p(f"LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_{i}/LlamaAttention_{i}") for i in range(32)]
    names = fold_module_paths(paths, [SELF] * 32)
    assert set(names) == {"LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_*/LlamaAttention_0"}


def t5_paths():
    """T5: 6 encoder blocks (self-attention) and 6 decoder blocks (self + cross-attention);
    Kineto numbers instances per class across the whole model."""
    paths, sigs = [], []
    for i in range(6):
        paths.append(p(f"T5ForConditionalGeneration_0/T5Stack_0/T5Block_{i}/T5LayerSelfAttention_{i}/T5Attention_{i}"))
        sigs.append(SELF)
    for i in range(6):
        j = 6 + i
        paths.append(
            p(f"T5ForConditionalGeneration_0/T5Stack_1/T5Block_{j}/T5LayerSelfAttention_{j}/T5Attention_{j + i}")
        )
        sigs.append(CROSS.replace("k[2,8,64,64]", "k[2,8,16,64]"))
        paths.append(
            p(f"T5ForConditionalGeneration_0/T5Stack_1/T5Block_{j}/T5LayerCrossAttention_{i}/T5Attention_{j + i + 1}")
        )
        sigs.append(CROSS)
    return paths, sigs


def test_t5_encoder_decoder_self_and_cross_are_three_sites():
    paths, sigs = t5_paths()
    site, names = name_sites([CallPlace(modules=m, signature=s) for m, s in zip(paths, sigs)])
    got = [n.name for n in names]
    assert got == [
        "T5ForConditionalGeneration_0/T5Stack_0/T5Block_*/T5LayerSelfAttention_0/T5Attention_0",
        "T5ForConditionalGeneration_0/T5Stack_1/T5Block_*/T5LayerSelfAttention_0/T5Attention_0",
        "T5ForConditionalGeneration_0/T5Stack_1/T5Block_*/T5LayerCrossAttention_0/T5Attention_0",
    ]
    assert site == [0] * 6 + [1, 2] * 6


def test_encoder_and_decoder_of_equal_structure_still_fold_their_layers_only():
    # two stacks of the same class and the same attention: a repeated layer (nothing tells them apart)
    paths = [p(f"M_0/Stack_{s}/Layer_{s * 4 + i}/Attn_{s * 4 + i}") for s in (0, 1) for i in range(4)]
    assert set(fold_module_paths(paths, [SELF] * 8)) == {"M_0/Stack_*/Layer_*/Attn_0"}
    # ... but different depths make them different
    paths = paths[:-1]
    assert set(fold_module_paths(paths, [SELF] * 7)) == {"M_0/Stack_0/Layer_*/Attn_0", "M_0/Stack_1/Layer_*/Attn_0"}


def test_spatial_and_temporal_attention_of_one_class_stay_apart():
    spatial, temporal = "sdpa q[64,8,256,64]", "sdpa q[1024,8,16,64]"
    paths, sigs = [], []
    for i in range(4):
        paths += [p(f"Video_0/Block_{i}/Attention_{2 * i}"), p(f"Video_0/Block_{i}/Attention_{2 * i + 1}")]
        sigs += [spatial, temporal]
    site, names = name_sites([CallPlace(modules=m, signature=s) for m, s in zip(paths, sigs)])
    assert [n.name for n in names] == ["Video_0/Block_*/Attention_0", "Video_0/Block_*/Attention_1"]
    assert site == [0, 1] * 4


def test_alternating_local_and_global_layers():
    local, glob = "flash q[1,8,4096,128] window 1024", "flash q[1,8,4096,128]"
    paths = [p(f"Gemma_0/Layer_{i}/Attn_{i}") for i in range(8)]
    names = fold_module_paths(paths, [local if i % 2 == 0 else glob for i in range(8)])
    assert names[0] == "Gemma_0/Layer_[0,2,4,…]/Attn_0" and names[1] == "Gemma_0/Layer_[1,3,5,…]/Attn_0"
    assert len(set(names)) == 2


def test_fallbacks_annotation_source_op():
    calls = [
        CallPlace(annotation="model.layers.3.self_attn", modules=p("M_0/A_3"), signature="x"),
        CallPlace(annotation="model.layers.11.self_attn", signature="x"),
        CallPlace(annotation="attention", signature="x"),
        CallPlace(source="train.py:42", signature="x"),
        CallPlace(signature="aten::_scaled_dot_product_flash_attention q[1,2,3,4]"),
    ]
    site, names = name_sites(calls)
    assert site == [0, 0, 1, 2, 3]
    assert [(n.name, n.kind) for n in names] == [
        ("model.layers.*.self_attn", "annotation"),
        ("attention", "annotation"),
        ("train.py:42", "source"),
        ("aten::_scaled_dot_product_flash_attention q[1,2,3,4]", "op"),
    ]
    assert fold_numbers("fp8_attention block_12") == "fp8_attention block_*"
