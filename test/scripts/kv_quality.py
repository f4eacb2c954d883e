#!/usr/bin/env python3
"""kv_quality.py: what a KV cache format costs, measured against float64.

For each prompt of a fixed set (chat-formatted, 40-110 tokens each):
  1. the float64 reference (ref_forward.py, --kv f64) reads the prompt and
     continues it greedily for N tokens: the reference continuation;
  2. for each cache format (f16, k8v4, k8v4r as ref_forward.py simulates
     them; strata matches these simulations within the tolerances of
     test/test_engine.c) the same model reads prompt + reference
     continuation (teacher forcing) and we take, at each of the N
     continuation positions, the KL divergence KL(p_f64 || p_format) of the
     next-token distributions and the relative logit error;
  3. each format also continues the prompt greedily on its own: the first
     step where its token differs from the reference's ("diverges at").
Prints one line per prompt and format, then per-format summaries.

With --text FILE --window N instead: the first N tokens of FILE read once
per format (teacher forcing), KL(p_f64 || p_format) at every position
(mean, 99th percentile, max) and the mean negative log-likelihood of the
window's second half (what `strata-cli perplexity` scores).

Usage: kv_quality.py MODEL [--n 32] [--formats f16,k8v4,k8v4r]
                     [--greedy-formats k8v4,k8v4r] [--prompts 0,1,..]
       kv_quality.py MODEL --text FILE --window 256 [--formats ...]
Slow (numpy float64, one forward per greedy step): about 40 minutes for the
whole set on 2 busy cores.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_forward as rf  # noqa: E402
import tok_check  # noqa: E402

PROMPTS = [
    "Explain in a few sentences why the sky looks blue during the day and red or orange at "
    "sunset. Keep it simple enough for a curious ten-year-old.",
    "Write a short, friendly email to a colleague asking whether the project meeting "
    "planned for Thursday afternoon can be moved to Friday morning, and offer two "
    "possible times.",
    "What are the main differences between a list and a tuple in Python? Give a small "
    "example of when you would use each one.",
    "Summarize the plot of Romeo and Juliet in three sentences, then say in one sentence "
    "what the play teaches about haste.",
    "I have two eggs, a cup of flour, some milk, butter and a pinch of salt. Suggest "
    "something I could cook for breakfast and give the steps.",
    "A train leaves a station at 9:15 and travels at 80 kilometres per hour. How far has "
    "it gone by 11:45? Show your reasoning step by step.",
    "Give me three tips for sleeping better when the weather is hot and the bedroom has "
    "no air conditioning.",
    "Translate the following sentence into French and explain any word choices that "
    "might be tricky: 'The old bookshop on the corner closes early on Sundays, so we "
    "should hurry.'",
]


def chat_ids(tok, text):
    s = "<|im_start|>user\n" + text + "<|im_end|>\n<|im_start|>assistant\n"
    tok.encode_special_tokens = False
    return tok.encode(s, add_special_tokens=False).ids


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def greedy(m, mode, ids, n):
    cache = rf.KVCache(m, mode)
    lg = rf.forward(m, cache, ids, 0)[-1]
    out = []
    for i in range(n):
        t = int(np.argmax(lg))
        out.append(t)
        if i + 1 < n:
            lg = rf.forward(m, cache, [t], len(ids) + i)[-1]
    return out


def text_window(m, tok, path, n, formats):
    with open(path, encoding="utf-8") as f:
        ids = tok.encode(f.read(), add_special_tokens=False).ids[:n]
    half = range(len(ids) // 2, len(ids) - 1)
    ref = log_softmax(rf.forward(m, rf.KVCache(m, "f64"), ids, 0))
    print("%s, first %d tokens: f64 nll(second half) %.5f" %
          (path, len(ids), -np.mean([ref[i, ids[i + 1]] for i in half])))
    for f in formats:
        lf = log_softmax(rf.forward(m, rf.KVCache(m, f), ids, 0))
        kl = (np.exp(ref) * (ref - lf)).sum(axis=-1)
        print("  %-6s KL mean %.5f p99 %.5f max %.5f  nll(second half) %.5f" %
              (f, kl.mean(), np.percentile(kl, 99), kl.max(),
               -np.mean([lf[i, ids[i + 1]] for i in half])), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--formats", default="f16,k8v4,k8v4r")
    ap.add_argument("--greedy-formats", default="k8v4,k8v4r",
                    help="formats that also continue greedily (f16 follows f64 token for "
                         "token: test/test_engine.c)")
    ap.add_argument("--prompts", default=",".join(str(i) for i in range(len(PROMPTS))))
    ap.add_argument("--text")
    ap.add_argument("--window", type=int, default=256)
    a = ap.parse_args()
    m = rf.Model(a.model)
    tok = tok_check.hf_tokenizer(a.model)
    formats = a.formats.split(",")
    if a.text:
        return text_window(m, tok, a.text, a.window, formats)
    summary = {f: {"kl": [], "klmax": [], "rel": [], "div": []} for f in formats}
    for pi in [int(x) for x in a.prompts.split(",")]:
        ids = chat_ids(tok, PROMPTS[pi])
        ref_cont = greedy(m, "f64", ids, a.n)
        full = ids + ref_cont[:-1]
        lref = rf.forward(m, rf.KVCache(m, "f64"), full, 0)[len(ids) - 1:]
        pref = log_softmax(lref)
        print("prompt %d (%d tokens): %r" % (pi, len(ids), tok.decode(ref_cont)[:60]), flush=True)
        for f in formats:
            lf = rf.forward(m, rf.KVCache(m, f), full, 0)[len(ids) - 1:]
            kl = (np.exp(pref) * (pref - log_softmax(lf))).sum(axis=-1)
            rel = np.sqrt(((lf - lref) ** 2).sum(axis=-1) / (lref ** 2).sum(axis=-1))
            div = -1
            if f in a.greedy_formats.split(","):
                own = greedy(m, f, ids, a.n)
                div = next((i for i in range(a.n) if own[i] != ref_cont[i]), a.n)
            s = summary[f]
            s["kl"].append(kl.mean())
            s["klmax"].append(kl.max())
            s["rel"].append(rel.max())
            s["div"].append(div)
            print("  %-6s KL mean %.5f max %.5f  rel logit err max %.4f  greedy %s" %
                  (f, kl.mean(), kl.max(), rel.max(), "not run" if div < 0 else
                   "identical" if div == a.n else "diverges at %d" % div), flush=True)
    print("summary over %d prompts, %d positions each:" % (len(summary[formats[0]]["kl"]), a.n))
    for f in formats:
        s = summary[f]
        s["div"] = [d for d in s["div"] if d >= 0]
        print("  %-6s KL mean %.5f (worst prompt %.5f) max %.5f  rel err max %.4f  "
              "greedy identical %d/%d, first divergence %s" %
              (f, np.mean(s["kl"]), np.max(s["kl"]), np.max(s["klmax"]), np.max(s["rel"]),
               sum(d == a.n for d in s["div"]), len(s["div"]),
               ",".join(str(d) for d in s["div"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
