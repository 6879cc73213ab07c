# Generates the H200 traces in this folder (run on a GPU from the repo root: OUT=<dir> python3 tests/data/memory/h200/make_traces.py;
# the files here are those outputs, renamed): sample_traces/generate.py GPT runs with profile_memory=True, and a 2-layer Llama decode with its DynamicCache.
import functools, glob, os, sys, time, traceback
import torch

sys.path.insert(0, "sample_traces")
import generate as G
from torch.profiler import ProfilerActivity, profile, record_function

OUT = os.environ["OUT"]
orig = torch.profiler.profile
torch.profiler.profile = functools.partial(orig, profile_memory=True)
for n in ["gpt4l_naive_train", "gpt4l_sdpa_train"]:
    t = time.time()
    try:
        print(G.profile_run(n, OUT, "cuda"), f"{time.time() - t:.1f}s", flush=True)
    except Exception:
        traceback.print_exc()
torch.profiler.profile = orig
from transformers import LlamaConfig, LlamaForCausalLM

for impl in ("sdpa", "eager"):
    try:
        cfg = LlamaConfig(
            hidden_size=1024,
            intermediate_size=2816,
            num_attention_heads=16,
            num_key_value_heads=4,
            num_hidden_layers=2,
            vocab_size=32000,
            max_position_embeddings=4096,
            attn_implementation=impl,
        )
        model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
        print(impl, model.config._attn_implementation, flush=True)
        ids = torch.randint(0, 32000, (4, 512), device="cuda")
        with torch.no_grad():
            o = model(ids, use_cache=True)
            past, nxt = o.past_key_values, o.logits[:, -1:].argmax(-1)
            print(type(past).__name__, flush=True)
            for _ in range(3):
                o = model(nxt, past_key_values=past, use_cache=True)
                past, nxt = o.past_key_values, o.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            with profile(
                activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                record_shapes=True,
                with_stack=True,
                profile_memory=True,
            ) as p:
                for i in range(3):
                    with record_function(f"ProfilerStep#{i + 1}"):
                        o = model(nxt, past_key_values=past, use_cache=True)
                        past, nxt = o.past_key_values, o.logits[:, -1:].argmax(-1)
                torch.cuda.synchronize()
        d = os.path.join(OUT, f"hf_decode_{impl}")
        os.makedirs(d, exist_ok=True)
        p.export_chrome_trace(os.path.join(d, f"hf_decode_{impl}.pt.trace.json.gz"))
    except Exception:
        traceback.print_exc()
for f in sorted(glob.glob(OUT + "/*/*")):
    print(f, os.path.getsize(f))
