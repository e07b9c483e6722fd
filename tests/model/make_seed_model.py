"""Build the config and tokenizer of a random-weight model in the seed's shape (no downloads, no weights).

The source write-up served a Qwen3.5-27B-class model (hybrid attention: three linear-attention layers to one full
one, a multi-token-prediction head, 262,144 tokens of context) on 2x RTX 3090. This writes that architecture at its
full size for vLLM's `load_format: dummy`: vLLM allocates every weight on the GPU and fills it with random values, so
the memory, the KV pool and the bytes read per decoded token are those of the real model while nothing is read from
disk (the 54 GB of bf16 safetensors are never written). The MTP layer's weights are there too (vLLM's `mtp` drafter
builds them from the same config), so the `mtp` profile's KV cost is the real one; random weights accept almost no
drafts, so its speed figures are not the real model's.

The tokenizer is tests/model/make_tiny_model.py's (byte-level BPE trained on the Python standard library, ChatML
with tools), its vocabulary filled up to the model's 248,320 ids with decodable tokens: random weights sample every id
of the vocabulary, and each must detokenize.

Usage: python make_seed_model.py OUT_DIR [--layers 64] [--arch Qwen3_5ForCausalLM]
Only the standard library, `tokenizers` and `transformers` (for the trained tokenizer's files) are needed.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_model import build_tokenizer  # noqa: E402  (the lab's one tokenizer builder)

# Qwen3.5-27B's text configuration (its model card's config.json, text_config): 64 layers, every fourth one full
# attention (24 query heads, 4 KV heads of 256, gated output), the others Gated DeltaNet linear attention (16 key and
# 48 value heads of 128), one MTP layer, partial rotary (a quarter of the head), 262,144 positions.
TEXT_CONFIG = {
    "model_type": "qwen3_5_text",
    "vocab_size": 248320,
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "num_hidden_layers": 64,
    "num_attention_heads": 24,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "hidden_act": "silu",
    "attn_output_gate": True,
    "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 48,
    "max_position_embeddings": 262144,
    "mtp_num_hidden_layers": 1,
    "mtp_use_dedicated_embeddings": False,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                        "mrope_interleaved": True, "mrope_section": [11, 11, 10]},
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "dtype": "bfloat16",
}


def fill_vocab(fast, size):
    """The trained tokenizer with its BPE vocabulary grown to `size` ids (' r<id>' tokens no merge produces)."""
    data = json.loads(fast.backend_tokenizer.to_str())
    vocab = data["model"]["vocab"]
    used = set(vocab.values()) | {t["id"] for t in data.get("added_tokens", [])}
    for i in range(size):
        if i not in used:
            vocab["\u0120r%d" % i] = i  # byte-level: '\u0120' is a space
    return data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--arch", default="Qwen3_5ForCausalLM",
                    help="the architectures entry (a text-only class vLLM registers for qwen3_5)")
    ap.add_argument("--layers", type=int, default=TEXT_CONFIG["num_hidden_layers"])
    ap.add_argument("--max-pos", type=int, default=TEXT_CONFIG["max_position_embeddings"])
    a = ap.parse_args()

    fast = build_tokenizer(4096)
    data = fill_vocab(fast, TEXT_CONFIG["vocab_size"])
    os.makedirs(a.out, exist_ok=True)
    fast.model_max_length = a.max_pos
    fast.save_pretrained(a.out)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False)

    config = dict(TEXT_CONFIG, num_hidden_layers=a.layers, max_position_embeddings=a.max_pos,
                  bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    config["layer_types"] = ["full_attention" if (i + 1) % config["full_attention_interval"] == 0
                             else "linear_attention" for i in range(a.layers)]
    config["architectures"] = [a.arch]
    with open(os.path.join(a.out, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2)
    with open(os.path.join(a.out, "generation_config.json"), "w", encoding="utf-8") as fh:
        json.dump({"bos_token_id": fast.bos_token_id, "eos_token_id": fast.eos_token_id,
                   "pad_token_id": fast.pad_token_id}, fh, indent=2)

    full = config["layer_types"].count("full_attention")
    kv_bytes = 2 * full * config["num_key_value_heads"] * config["head_dim"] * 2
    print("wrote %s (%s, %d layers, %d full attention: %d KiB of bf16 KV a token; vocab %d; no weights: serve it "
          "with load_format dummy)" % (a.out, a.arch, a.layers, full, kv_bytes // 1024, len(data["model"]["vocab"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
