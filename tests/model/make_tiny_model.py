"""Build a tiny random-weight causal LM + locally trained tokenizer (no downloads).

The e2e scenario and `make demo` serve this model with the real vLLM 0.28.0 CPU build:
no model hub is reachable, so everything is made here, deterministically (seeded).

Usage: python make_tiny_model.py OUT_DIR [--arch qwen3|llama] [--vocab 4096] [--seed 0]
Everything comes from this machine: the tokenizer is a byte-level BPE trained
on the Python standard library's own .py files, the weights are random (seed 0).
"""
import argparse
import glob
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig,
                          PreTrainedTokenizerFast, Qwen3Config)

SPECIALS = ["<|endoftext|>", "<|bos|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]


def corpus_iter(max_files=400):
    stdlib = os.path.dirname(os.__file__)
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))[:max_files]
    for path in files:
        with open(path, encoding="utf-8", errors="ignore") as fh:
            text = fh.read()
        for i in range(0, len(text), 2000):
            yield text[i:i + 2000]


def build_tokenizer(vocab_size):
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_iter(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        bos_token="<|bos|>",
        pad_token="<|pad|>",
        model_max_length=4096,
    )
    # ChatML with tools, in the shape of the Qwen3-Coder templates (tiny_chat_template.jinja beside this file),
    # so /v1/chat/completions gets what a coding agent sends: tool definitions, tool calls, tool results.
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_chat_template.jinja"), encoding="utf-8") as fh:
        fast.chat_template = fh.read()
    return fast


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--arch", default="qwen3", choices=["llama", "qwen3"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--max-pos", type=int, default=4096)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    tok = build_tokenizer(a.vocab)
    vocab = len(tok)
    common = dict(
        vocab_size=vocab,
        hidden_size=a.hidden,
        intermediate_size=a.hidden * 2,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.hidden // a.heads,
        max_position_embeddings=a.max_pos,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    cfg = LlamaConfig(**common) if a.arch == "llama" else Qwen3Config(**common)
    dtype = getattr(torch, a.dtype)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.eval()
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out, safe_serialization=True)
    tok.save_pretrained(a.out)

    # Self-check: reload from disk and run one greedy step.
    tok2 = AutoTokenizer.from_pretrained(a.out)
    m2 = AutoModelForCausalLM.from_pretrained(a.out, dtype=dtype)
    ids = tok2("def hello(world):", return_tensors="pt").input_ids
    with torch.no_grad():
        out = m2.generate(ids, max_new_tokens=8, do_sample=False)
    n_params = sum(p.numel() for p in m2.parameters())
    print(f"saved {a.arch} to {a.out}: vocab={vocab} params={n_params} "
          f"prompt_ids={ids.tolist()[0]} gen={out.tolist()[0][ids.shape[1]:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
