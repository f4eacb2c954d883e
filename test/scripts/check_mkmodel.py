#!/usr/bin/env python3
"""check_mkmodel.py: check a `strata-cli mkmodel` file with the python `gguf`
package, against the shapes and keys doc/formats.md section 4 prescribes for the
parameters it was made with (recomputed here, not read from strata).

  check_mkmodel.py FILE --arch A --layers L --dim D --heads H --kv-heads K
                   --head-dim HD --ff F [--experts E --experts-used U --ff-exp FE]
                   --vocab V --type T [--tied]

Also checks the vocabulary: 3 control tokens, the 256 GPT-2 byte symbols,
token types, merges whose halves and results are tokens; and, when the
`tokenizers` package is present, that a Hugging Face BPE built from the
file's vocab and merges encodes and decodes text losslessly.
Prints "ok" and exits 0, or prints each problem and exits 1.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_quants  # noqa: E402,F401  (registers Q2_0 with the gguf package)
from gguf import GGUFReader  # noqa: E402

problems = []


def expect(cond, msg):
    if not cond:
        problems.append(msg)


def bytes_to_unicode():
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    for k in ("arch", "type"):
        ap.add_argument("--" + k, required=True)
    for k in ("layers", "dim", "heads", "kv-heads", "head-dim", "ff", "vocab"):
        ap.add_argument("--" + k, type=int, required=True)
    for k in ("experts", "experts-used", "ff-exp", "window"):
        ap.add_argument("--" + k, type=int, default=0)
    ap.add_argument("--tied", action="store_true")
    a = ap.parse_args()

    r = GGUFReader(a.file)
    f = {k: v for k, v in r.fields.items()}

    def val(k):
        return f[k].contents() if k in f else None

    A = a.arch
    D, H, K, HD = a.dim, a.heads, a.kv_heads, a.head_dim
    moe = A == "qwen3moe"
    keys = {
        "general.architecture": A,
        A + ".block_count": a.layers, A + ".embedding_length": D,
        A + ".feed_forward_length": a.ff, A + ".attention.head_count": H,
        A + ".attention.head_count_kv": K, A + ".rope.dimension_count": HD,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    if moe:
        keys.update({A + ".expert_count": a.experts, A + ".expert_used_count": a.experts_used,
                     A + ".expert_feed_forward_length": a.ff_exp})
    if A in ("qwen3", "qwen3moe", "gemma3"):
        keys.update({A + ".attention.key_length": HD, A + ".attention.value_length": HD})
    if a.window:
        keys[A + ".attention.sliding_window"] = a.window
    else:
        expect(A + ".attention.sliding_window" not in f, "sliding_window without --window")
    for k, want in keys.items():
        expect(val(k) == want, "key %s = %r, want %r" % (k, val(k), want))
    for k in (A + ".context_length", A + ".rope.freq_base", A + ".attention.layer_norm_rms_epsilon",
              "tokenizer.ggml.pre"):
        expect(k in f, "key %s missing" % k)
    tmpl = val("tokenizer.chat_template") or ""
    expect("<|im_start|>" in tmpl, "chat_template is not ChatML")

    # Tensors: names and shapes (ne order) of doc/formats.md 4.2.
    Dq, Dkv = H * HD, K * HD
    want = {"token_embd.weight": [D, a.vocab], "output_norm.weight": [D]}
    if not a.tied:
        want["output.weight"] = [D, a.vocab]
    for il in range(a.layers):
        p = "blk.%d." % il
        want.update({p + "attn_norm.weight": [D], p + "attn_q.weight": [D, Dq],
                     p + "attn_k.weight": [D, Dkv], p + "attn_v.weight": [D, Dkv],
                     p + "attn_output.weight": [Dq, D], p + "ffn_norm.weight": [D]})
        if A == "qwen2":
            want.update({p + "attn_q.bias": [Dq], p + "attn_k.bias": [Dkv], p + "attn_v.bias": [Dkv]})
        if A in ("qwen3", "qwen3moe", "gemma3"):
            want.update({p + "attn_q_norm.weight": [HD], p + "attn_k_norm.weight": [HD]})
        if A == "gemma3":
            want.update({p + "post_attention_norm.weight": [D], p + "post_ffw_norm.weight": [D]})
        if moe:
            E, F = a.experts, a.ff_exp
            want.update({p + "ffn_gate_inp.weight": [D, E], p + "ffn_gate_exps.weight": [D, F, E],
                         p + "ffn_up_exps.weight": [D, F, E], p + "ffn_down_exps.weight": [F, D, E]})
        else:
            want.update({p + "ffn_gate.weight": [D, a.ff], p + "ffn_up.weight": [D, a.ff],
                         p + "ffn_down.weight": [a.ff, D]})
    got = {t.name: t for t in r.tensors}
    expect(set(got) == set(want), "tensor names differ: missing %s, extra %s" %
           (sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5]))
    tname = a.type.upper()
    n_req = 0
    for name, shape in want.items():
        t = got.get(name)
        if t is None:
            continue
        expect([int(x) for x in t.shape] == shape, "%s shape %s, want %s" % (name, list(t.shape), shape))
        if name.endswith("norm.weight") or name.endswith(".bias") or "gate_inp" in name:
            expect(t.tensor_type.name == "F32", "%s is %s, want F32" % (name, t.tensor_type.name))
            x = ref_quants.dequantize(np.asarray(t.data), t.tensor_type)
            if name.endswith("norm.weight"):
                expect(abs(float(np.mean(x)) - 1) < 0.2, "%s mean %.3f, want ~1" % (name, np.mean(x)))
        else:
            n_req += t.tensor_type.name == tname
            ok = t.tensor_type.name in (tname, "Q8_0", "F32")
            expect(ok, "%s is %s" % (name, t.tensor_type.name))
    expect(n_req > 0, "no tensor has the requested type %s" % tname)

    # Vocabulary.
    toks = val("tokenizer.ggml.tokens")
    types = val("tokenizer.ggml.token_type")
    merges = val("tokenizer.ggml.merges")
    expect(len(toks) == a.vocab, "%d tokens, want %d" % (len(toks), a.vocab))
    expect(len(types) == len(toks), "token_type length differs")
    expect(toks[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "special tokens %r" % toks[:3])
    expect(list(types[:3]) == [3, 3, 3] and all(t == 1 for t in types[3:]), "token types")
    b2u = bytes_to_unicode()
    expect(set(toks[3:259]) == set(b2u.values()), "byte tokens are not the 256 GPT-2 symbols")
    expect(len(set(toks)) == len(toks), "duplicate tokens")
    vocab = {t: i for i, t in enumerate(toks)}
    for m in merges:
        l, rr = m.split(" ", 1)
        if l not in vocab or rr not in vocab or l + rr not in vocab:
            expect(False, "merge %r is not closed over the vocabulary" % m)
            break
    expect(len(merges) == a.vocab - 259, "%d merges, want %d" % (len(merges), a.vocab - 259))

    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    except ImportError:
        Tokenizer = None
    if Tokenizer is not None and not problems:
        tk = Tokenizer(models.BPE(vocab, [tuple(m.split(" ", 1)) for m in merges]))
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        text = "The river begins as a thin stream, and the market closes. Ünïcødé 123 ✓\n"
        ids = tk.encode(text).ids
        expect(tk.decode(ids) == text, "HF BPE round trip failed")
        expect(len(ids) < len(text.encode()), "merges never apply (%d ids for %d bytes)" %
               (len(ids), len(text.encode())))

    if problems:
        for p in problems:
            print("check_mkmodel:", p)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
