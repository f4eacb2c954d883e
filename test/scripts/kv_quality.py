#!/usr/bin/env python3
"""kv_quality.py: what a KV cache format costs, measured against float64.

For each prompt of a fixed set (chat turns of 50-71 tokens with the template's
system turn; written for SmolLM2's ChatML):
  1. strata (`strata-cli run --chat --temp 0 -n N --kv KV`, CPU backend)
     continues it greedily with each cache format; the f16 cache's
     continuation is the reference (strata with f16 follows the float64
     reference token for token: test/test_engine.c), and a format
     "diverges at" the first token where its continuation differs (the
     texts are compared as token ids, re-tokenized);
  2. the float64 reference (ref_forward.py) reads prompt + reference
     continuation once exactly and once with each format as ref_forward.py
     simulates it (strata matches these simulations within the tolerances
     of test/test_engine.c); at each of the N continuation positions we take
     the KL divergence KL(p_f64 || p_format) of the next-token distributions
     and the relative logit error.
Prints one line per prompt and format, then per-format summaries.  Numpy
float64 reads about 1 GB of weights per forward, so greedy decoding is done
by strata, not here.

With --text FILE --window N instead: the first N tokens of FILE read once
per format (teacher forcing), KL(p_f64 || p_format) at every position
(mean, 99th percentile, max) and the mean negative log-likelihood of the
window's second half (what `strata-cli perplexity` scores).

Usage: kv_quality.py MODEL --cli build/strata-cli [--n 32]
                     [--formats f16,k8v4,k8v4r] [--prompts 0,1,..]
       kv_quality.py MODEL --text FILE --window 256 [--formats ...]

"""
import argparse
import os
import subprocess
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
    """One user turn as strata renders it for SmolLM2 (its template's default
    system turn first), so the float64 reads the ids strata continued."""
    s = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
         "Face<|im_end|>\n<|im_start|>user\n" + text + "<|im_end|>\n<|im_start|>assistant\n")
    tok.encode_special_tokens = False
    return tok.encode(s, add_special_tokens=False).ids


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def strata_greedy(cli, model, prompt, kv, n, tok):
    """strata's greedy continuation of one chat turn, as token ids."""
    out = subprocess.run([cli, "run", "-m", model, "--chat", "-p", prompt, "-n", str(n),
                          "--temp", "0", "--kv", kv, "--backend", "cpu"],
                         check=True, capture_output=True, text=True).stdout
    return tok.encode(out.rstrip("\n"), add_special_tokens=False).ids[:n]


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
    ap.add_argument("--cli", default="build/strata-cli")
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
        conts = {f: strata_greedy(a.cli, a.model, PROMPTS[pi], f, a.n, tok) for f in
                 sorted(set(formats) | {"f16"})}
        ref_cont = conts["f16"]
        full = ids + ref_cont[:-1]
        lref = rf.forward(m, rf.KVCache(m, "f64"), full, 0)[len(ids) - 1:]
        pref = log_softmax(lref)
        print("prompt %d (%d tokens, %d continued): %r" %
              (pi, len(ids), len(ref_cont), tok.decode(ref_cont)[:60]), flush=True)
        for f in formats:
            lf = rf.forward(m, rf.KVCache(m, f), full, 0)[len(ids) - 1:]
            kl = (np.exp(pref) * (pref - log_softmax(lf))).sum(axis=-1)
            rel = np.sqrt(((lf - lref) ** 2).sum(axis=-1) / (lref ** 2).sum(axis=-1))
            own, L = conts[f], len(ref_cont)
            div = next((i for i in range(min(len(own), L)) if own[i] != ref_cont[i]),
                       L if len(own) == L else min(len(own), L))
            s = summary[f]
            s["kl"].append(kl.mean())
            s["klmax"].append(kl.max())
            s["rel"].append(rel.max())
            s["div"].append(a.n if div == L and len(own) == L else div)
            print("  %-6s KL mean %.5f max %.5f  rel logit err max %.4f  greedy %s" %
                  (f, kl.mean(), kl.max(), rel.max(),
                   "identical" if own == ref_cont else "diverges at %d" % div), flush=True)
    print("summary over %d prompts, %d positions each:" % (len(summary[formats[0]]["kl"]), a.n))
    for f in formats:
        s = summary[f]
        print("  %-6s KL mean %.5f (worst prompt %.5f) max %.5f  rel err max %.4f  "
              "greedy identical %d/%d, first divergence %s" %
              (f, np.mean(s["kl"]), np.max(s["kl"]), np.max(s["klmax"]), np.max(s["rel"]),
               sum(d == a.n for d in s["div"]), len(s["div"]),
               ",".join(str(d) for d in s["div"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
