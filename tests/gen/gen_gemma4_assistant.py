#!/usr/bin/env python3
"""Writes a tiny random-weight Gemma 4 assistant (Gemma4AssistantForCausalLM, the drafter Google
ships beside each Gemma 4 model) for the tiny Gemma 4 of gen_gemma4.py, and golden draft logits.

The assistant, as transformers' modeling_gemma4_assistant and its candidate generator define it:
  - its input for a token t at position p is pre_projection([the model's own scaled embedding
    of t ; a hidden state h]), h being the model's final (normed) hidden state at p - 1 for a
    first draft, and the assistant's own output hidden state for each later one;
  - a Gemma 4 text model whose layers all reuse K and V ("num_kv_shared_layers" = every layer):
    each layer computes queries only (q_proj, q_norm, RoPE at p) and attends to the K and V the
    model's last layer of the same type wrote for positions < p; the rest of a Gemma 4 layer
    as in the model (sandwich norms, GELU-tanh MLP, layer_scalar);
  - its final norm, then post_projection back to the model's width (the next draft's h), and
    logits from the tied head without soft-capping; with use_ordered_embeddings, only the
    tokens of the centroid_intermediate_top_k most likely of num_centroids clusters
    (masked_embedding.centroids, token_ordering) get their logits, the rest the smallest of
    those minus 1;
  - every draft of one round at the same position p (the last token the model accepted).
The model's sliding layers keep their last window - 1 tokens (transformers' sliding cache;
sparkd's window cache holds as many for sure): the golden drafts attend to those, the full
layers to every token before p.

Under tests/golden/models/gemma4_assistant/:
  config.json, model.safetensors (BF16 weights, token_ordering int64)
  assistant_golden.json   per prompt: its tokens, the model's next token, the draft tokens fed
                          to the assistant (the first is that next token), and the files below
  assistant_logits_<i>.f32  [drafts, vocab] little-endian f32
  assistant_hidden_<i>.f32  [drafts, model hidden] the assistant's output hidden states

Input: tests/golden/models/gemma4 (gen_gemma4.py). Run where torch is installed:
  python tests/gen/gen_gemma4_assistant.py [--models tests/golden/models]
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import DynamicCache, Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM
from transformers import Gemma4TextConfig

from gen_gemma4 import LAYER_TYPES as MODEL_LAYER_TYPES, ROPE, VOCAB, WINDOW, random_state

SEED = 4600
PROMPT_LENGTHS = (1, 5, 20)  # 20: past the window of 8
DRAFTS = 3
LAYER_TYPES = ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]
CENTROIDS, TOP_K = 16, 4


def config():
    text = Gemma4TextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=len(LAYER_TYPES),
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
        num_global_key_value_heads=1, attention_k_eq_v=True, sliding_window=WINDOW,
        layer_types=list(LAYER_TYPES), rope_parameters=json.loads(json.dumps(ROPE)),
        max_position_embeddings=256, rms_norm_eps=1e-6, final_logit_softcapping=30.0,
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, num_kv_shared_layers=len(LAYER_TYPES),
        use_double_wide_mlp=False, enable_moe_block=False, tie_word_embeddings=True,
        bos_token_id=2, eos_token_id=1, pad_token_id=0)
    return Gemma4AssistantConfig(text_config=text, backbone_hidden_size=64, use_ordered_embeddings=True,
                                 num_centroids=CENTROIDS, centroid_intermediate_top_k=TOP_K, tie_word_embeddings=True)


def write_assistant(out, models):
    os.makedirs(out, exist_ok=True)
    cfg = config()
    torch.manual_seed(0)
    assistant = Gemma4AssistantForCausalLM(cfg)
    gen = torch.Generator().manual_seed(SEED)
    state = {k: v for k, v in random_state(assistant, gen).items() if "token_ordering" not in k}
    state["masked_embedding.token_ordering"] = torch.randperm(VOCAB, generator=gen).to(torch.int64)
    save_file({k: v.contiguous() for k, v in state.items() if k != "lm_head.weight"},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    d = cfg.to_dict()
    d["text_config"].pop("per_layer_config", None)  # derived from the keys below when read back
    d["text_config"]["global_head_dim"] = 32
    d["text_config"]["num_global_key_value_heads"] = 1
    d["architectures"] = ["Gemma4AssistantForCausalLM"]
    d["dtype"] = "bfloat16"
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)

    assistant = Gemma4AssistantForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    got = assistant.state_dict()
    for name, v in state.items():
        if name != "lm_head.weight":
            assert torch.equal(got[name], v.to(got[name].dtype)), f"transformers read {name} back differently"
    layers = assistant.model.layers
    assert all(layer.self_attn.is_kv_shared_layer for layer in layers)
    assert not any(hasattr(layer.self_attn, "k_proj") for layer in layers)
    model = Gemma4ForCausalLM.from_pretrained(os.path.join(models, "gemma4"), dtype=torch.float32,
                                              attn_implementation="eager").eval()
    # The model's last layer of each type is the one the assistant reads.
    last_of = {t: max(i for i, u in enumerate(MODEL_LAYER_TYPES) if u == t) for t in set(LAYER_TYPES)}

    rng = np.random.default_rng(SEED + 1)
    cases = []
    for j, n in enumerate(PROMPT_LENGTHS):
        ids = rng.integers(3, VOCAB, size=n).tolist()
        cache = DynamicCache(config=model.config)
        with torch.no_grad():
            out_model = model(torch.tensor([ids]), past_key_values=cache, use_cache=True, output_hidden_states=True)
        hidden = out_model.hidden_states[-1][:, -1:]  # normed: transformers ties it to last_hidden_state
        cap = model.config.final_logit_softcapping
        assert torch.allclose(torch.tanh(model.lm_head(hidden) / cap) * cap, out_model.logits[:, -1:], atol=1e-5)
        shared = {t: (cache.layers[l].keys, cache.layers[l].values) for t, l in last_of.items()}
        assert shared["full_attention"][0].shape[2] == n
        assert shared["sliding_attention"][0].shape[2] == min(n, WINDOW - 1), shared["sliding_attention"][0].shape
        token = int(out_model.logits[0, -1].argmax())
        inputs, logits, hiddens = [], [], []
        for _ in range(DRAFTS):
            inputs.append(token)
            with torch.no_grad():
                embedded = model.model.embed_tokens(torch.tensor([[token]]))  # times sqrt(hidden_size)
                o = assistant(inputs_embeds=torch.cat([embedded, hidden], dim=-1), position_ids=torch.tensor([[n]]),
                              shared_kv_states=shared, attention_mask=None)
            logits.append(o.logits[0, -1].float())
            hiddens.append(o.last_hidden_state[0, -1].float())
            hidden = o.last_hidden_state
            token = int(o.logits[0, -1].argmax())
        lf, hf = f"assistant_logits_{j}.f32", f"assistant_hidden_{j}.f32"
        torch.stack(logits).numpy().astype("<f4").tofile(os.path.join(out, lf))
        torch.stack(hiddens).numpy().astype("<f4").tofile(os.path.join(out, hf))
        cases.append({"prompt": ids, "draft_inputs": inputs, "logits": lf, "hidden": hf})
        print("prompt", n, "drafts", inputs[1:] + [token], "max |logit|", float(torch.stack(logits).abs().max()))
    reference = (f"transformers {transformers.__version__}, torch {torch.__version__}, f32 from BF16 weights, "
                 "eager attention; the model: tests/golden/models/gemma4")
    with open(os.path.join(out, "assistant_golden.json"), "w") as f:
        json.dump({"reference": reference, "model": "gemma4", "model_layers_read": last_of,
                   "cases": cases}, f, indent=1, sort_keys=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.join(os.path.dirname(__file__), "..", "golden", "models"))
    args = ap.parse_args()
    write_assistant(os.path.join(args.models, "gemma4_assistant"), args.models)


if __name__ == "__main__":
    main()
