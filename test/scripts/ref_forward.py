#!/usr/bin/env python3
"""ref_forward.py: an independent float64 forward pass, the oracle strata's C
engine is tested against.

Written from doc/formats.md section 4 only (not from strata's C code): the
weights come from the python `gguf` package's reader and dequantizers (plus
ref_quants.py for what the package lacks), and every activation is float64.

Architectures: llama (optionally with experts, Mixtral style), qwen2, qwen3,
qwen3moe, gemma3.  Per block (4.3):
    h  = x + Wo . Attn(RoPE(Q), RoPE(K), V)     on RMSNorm(x) * attn_norm
    x' = h + FFN(RMSNorm(h) * ffn_norm)
    logits = output . (RMSNorm(x) * output_norm)   (output = token_embd if absent)
qwen2 adds the q/k/v biases after the matmuls (any present *.bias is added);
qwen3/qwen3moe RMS-normalise each Q and K head before RoPE; RoPE is NORM
(adjacent pairs) for llama and NEOX (half split) for the qwen archs (4.4);
MoE is softmax over all experts -> top-k -> renormalise (4.5).
gemma3 (4.6): the embedding row times sqrt(n_embd) (rounded to float32, as
the constant is), Q/K head norms, sandwich norms (the attention output and
the FFN output are RMS-normalised by post_attention_norm / post_ffw_norm
before each residual add), GELU-tanh gating, and sliding-window attention
on layers with il % 6 != 5 (a query at p sees keys p - window < t <= p)
with RoPE base 10000 and no scaling there; the norm weights are used as
stored (the converter already added Gemma's 1).

KV cache (--kv):
  f64   keys and values kept exactly.
  f16   keys and values rounded to float32, then to float16 (as strata's
        f16 cache stores them).
  k8v4  what strata's cache stores: each 32-element block of each per-token,
        per-kv-head K vector goes through Q8_0 and V through Q4_0 with ggml's
        recipes in float32 (doc/formats.md 3.1, 3.2, 3.5) and is decoded again
        before attention.  The current token's own K/V are quantized too
        (the engine appends first, then attends over the cache).
  k8v4r k8v4 of the rotated head vectors R k and R v, rotated back with R^T
        after decoding (equivalent to strata rotating q and the attention
        output, since R is orthogonal): R = (1/sqrt(d)) H_d diag(s), H_d the
        Sylvester-order Walsh-Hadamard matrix, s[i] = -1 where bit i % 64 of
        splitmix64 output i // 64 from state 0x5354524154415231 is set
        (doc/engine.md, "The KV cache").
  k8v4r2 k8v4r with two changes (doc/engine.md, "The KV cache"): K stores
        Q8_0 of R k - R b_k (b_k the layer's K bias, when it has one; it is
        added back after decoding, which moves every score of a query by the
        same amount, as the engine's omission of it does) and V's 32-blocks
        are coded into the IQ4_NL levels with cpu_quant_v4nl's scale search.

Usage:
  ref_forward.py MODEL --tokens 1,2,3 [--kv f64|f16|k8v4|k8v4r|k8v4r2] [--last]
                 [--logits-out F.npy] [--print-top K] [--greedy N] [--stats]

  --logits-out  float64 array [positions, n_vocab]: one row per position fed
                through the model (the prompt, then the first N-1 greedy
                tokens), or only the last row with --last.
  --print-top K per position (or the last): "pos P: id:logit ...".
  --greedy N    continue N tokens greedily (argmax, lowest id on ties) and
                print "greedy: id id ...".
  --stats       "stats: positions=P vocab=V finite=1 std_min=... std_max=..."
                (std of each position's logits over the vocabulary).
Tokenization is not this script's job: it takes ids.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_quants  # noqa: E402  (registers Q2_0 with the gguf package)
from gguf import GGUFReader  # noqa: E402

NEOX_ARCHS = ("qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma", "gemma2", "gemma3")
SUPPORTED = ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3")


class Model:
    def __init__(self, path):
        self.r = GGUFReader(path, "r")
        self.fields = self.r.fields
        self.tensors = {t.name: t for t in self.r.tensors}
        self._cache = {}
        a = self.arch = self.get("general.architecture")
        if a not in SUPPORTED:
            raise SystemExit("ref_forward: architecture %r not supported (%s)" % (a, ", ".join(SUPPORTED)))
        self.n_layer = int(self.get(a + ".block_count"))
        self.n_embd = int(self.get(a + ".embedding_length"))
        self.n_head = int(self.get(a + ".attention.head_count"))
        self.n_head_kv = int(self.get(a + ".attention.head_count_kv", self.n_head))
        self.head_dim = int(self.get(a + ".attention.key_length", self.n_embd // self.n_head))
        self.head_dim_v = int(self.get(a + ".attention.value_length", self.n_embd // self.n_head))
        if self.head_dim_v != self.head_dim:
            raise SystemExit("ref_forward: key_length != value_length is not supported")
        self.n_rot = int(self.get(a + ".rope.dimension_count", self.head_dim))
        self.eps = float(np.float32(self.get(a + ".attention.layer_norm_rms_epsilon")))
        self.rope_base = float(np.float32(self.get(a + ".rope.freq_base", 10000.0)))
        self.n_expert = int(self.get(a + ".expert_count", 0))
        self.n_expert_used = int(self.get(a + ".expert_used_count", 0))
        self.neox = a in NEOX_ARCHS
        self.qk_norm = a in ("qwen3", "qwen3moe", "gemma3")
        self.gemma3 = a == "gemma3"
        scale = float(self.get(a + ".attention.scale", 0.0))
        self.attn_scale = scale if scale != 0.0 else 1.0 / np.sqrt(self.head_dim)
        self.window = 0
        self.softcap = 0.0
        if self.gemma3:
            if self.n_layer == 62:  # the 27B: query_pre_attn_scalar = n_embd / n_head
                self.attn_scale = 1.0 / np.sqrt(self.n_embd // self.n_head)
            self.window = int(self.get(a + ".attention.sliding_window", 0))
            self.softcap = float(self.get(a + ".final_logit_softcapping", 0.0))
        # Positions are divided by the linear factor (4.4); YaRN/longrope are refused.
        self.pos_scale = 1.0
        st = self.get(a + ".rope.scaling.type", "none")
        if st == "linear":
            self.pos_scale = 1.0 / float(self.get(a + ".rope.scaling.factor", 1.0))
        elif st not in ("none", ""):
            raise SystemExit("ref_forward: rope scaling %r not implemented" % st)
        legacy = float(self.get(a + ".rope.scale_linear", 0.0))
        if legacy:
            self.pos_scale = 1.0 / legacy
        self.rope_freqs = self.w("rope_freqs.weight") if "rope_freqs.weight" in self.tensors else None
        emb = self.tensors["token_embd.weight"]
        self.n_vocab = int(emb.shape[1])
        assert self.n_head % self.n_head_kv == 0
        assert self.n_rot % 2 == 0 and self.n_rot <= self.head_dim

    def get(self, key, default=None):
        f = self.fields.get(key)
        if f is None:
            if default is None:
                raise SystemExit("ref_forward: required key %s missing" % key)
            return default
        return f.contents()

    def has(self, name):
        return name in self.tensors

    def w(self, name):
        """Tensor as float64, numpy shape = reversed ne ([out, in] for matrices)."""
        if name not in self._cache:
            t = self.tensors.get(name)
            if t is None:
                raise SystemExit("ref_forward: tensor %s missing" % name)
            x = ref_quants.dequantize(np.asarray(t.data), t.tensor_type)
            shape = tuple(int(v) for v in reversed(t.shape.tolist()))
            self._cache[name] = np.asarray(x, dtype=np.float64).reshape(shape)
        return self._cache[name]


def rmsnorm(x, w, eps):
    """x: [..., n]; normalise over the last axis, then scale by w [n]."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def linear(m, x, base):
    """x [n, in] -> [n, out] with base.weight [out, in] (+ base.bias if present)."""
    y = x @ m.w(base + ".weight").T
    if m.has(base + ".bias"):
        y = y + m.w(base + ".bias")
    return y


def layer_window(m, il):
    """gemma3: the window of layer il, 0 for a global layer (every 6th)."""
    return m.window if m.window > 0 and il % 6 != 5 else 0


def rope(m, x, pos, local=False):
    """x: [n, heads, head_dim]; pos: [n] integer positions.  4.4.  local:
    a gemma3 windowed layer (base 10000, no scaling)."""
    half = m.n_rot // 2
    i = np.arange(half, dtype=np.float64)
    base, pscale = (10000.0, 1.0) if local else (m.rope_base, m.pos_scale)
    inv = base ** (-2.0 * i / m.n_rot)
    if m.rope_freqs is not None:
        inv = inv / m.rope_freqs[:half]
    theta = (np.asarray(pos, dtype=np.float64) * pscale)[:, None] * inv[None, :]  # [n, half]
    c = np.cos(theta)[:, None, :]
    s = np.sin(theta)[:, None, :]
    y = x.copy()
    if m.neox:
        a, b = x[..., :half], x[..., half:m.n_rot]
        y[..., :half] = a * c - b * s
        y[..., half:m.n_rot] = a * s + b * c
    else:
        a, b = x[..., 0:m.n_rot:2], x[..., 1:m.n_rot:2]
        y[..., 0:m.n_rot:2] = a * c - b * s
        y[..., 1:m.n_rot:2] = a * s + b * c
    return y


def silu(z):
    return z / (1.0 + np.exp(-z))


def gelu_tanh(z):
    return 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z ** 3)))


def ffn_dense(m, p, x):
    g = x @ m.w(p + "ffn_gate.weight").T
    u = x @ m.w(p + "ffn_up.weight").T
    act = gelu_tanh if m.gemma3 else silu
    return (act(g) * u) @ m.w(p + "ffn_down.weight").T


def ffn_moe(m, p, x):
    """4.5: softmax over all experts, top-k, renormalise, weighted SwiGLU experts."""
    r = x @ m.w(p + "ffn_gate_inp.weight").T                  # [n, E]
    r = r - r.max(axis=1, keepdims=True)
    prob = np.exp(r)
    prob /= prob.sum(axis=1, keepdims=True)
    k = m.n_expert_used
    sel = np.argsort(-prob, axis=1, kind="stable")[:, :k]     # ties: lower expert id first
    wsel = np.take_along_axis(prob, sel, axis=1)
    wsel = wsel / wsel.sum(axis=1, keepdims=True)
    gate = m.w(p + "ffn_gate_exps.weight")                    # [E, ff_exp, D]
    up = m.w(p + "ffn_up_exps.weight")
    down = m.w(p + "ffn_down_exps.weight")                    # [E, D, ff_exp]
    out = np.zeros_like(x)
    for e in np.unique(sel):
        rows, slot = np.nonzero(sel == e)
        xe = x[rows]
        he = silu(xe @ gate[e].T) * (xe @ up[e].T)
        out[rows] += wsel[rows, slot][:, None] * (he @ down[e].T)
    return out


ROT_SEED = 0x5354524154415231
M64 = (1 << 64) - 1


def rot_signs(d):
    """s[d] of the k8v4r rotation: splitmix64 outputs 0, 1, ... as sign bits."""
    s = np.ones(d)
    for i in range(d):
        k, b = divmod(i, 64)
        z = (ROT_SEED + (k + 1) * 0x9E3779B97F4A7C15) & M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        if (z >> b) & 1:
            s[i] = -1.0
    return s


def rot_matrix(d):
    """R = (1/sqrt(d)) H_d diag(s) as a float64 [d, d] matrix."""
    i = np.arange(d)
    pc = np.vectorize(lambda v: bin(int(v)).count("1"))(i[:, None] & i[None, :])
    H = np.where(pc % 2 == 0, 1.0, -1.0)
    return H * rot_signs(d)[None, :] / np.sqrt(d)


class KVCache:
    def __init__(self, m, mode):
        self.mode = mode
        self.R = rot_matrix(m.head_dim) if mode in ("k8v4r", "k8v4r2") else None
        self.m = m
        self.k = [np.zeros((0, m.n_head_kv, m.head_dim)) for _ in range(m.n_layer)]
        self.v = [np.zeros((0, m.n_head_kv, m.head_dim)) for _ in range(m.n_layer)]

    def append(self, il, k, v):
        """k, v: [n, n_head_kv, head_dim] float64 for the new positions."""
        if self.mode == "k8v4r2":
            bk = np.zeros((self.m.n_head_kv, self.m.head_dim))
            if self.m.has("blk.%d.attn_k.bias" % il):
                bk = self.m.w("blk.%d.attn_k.bias" % il).reshape(bk.shape)
            rb = (bk @ self.R.T).astype(np.float32)                # R b_k per kv head
            rk = (k @ self.R.T).astype(np.float32) - rb[None]      # float32, as the engine
            k = (ref_quants.kv_q8_0_roundtrip(rk).astype(np.float64) + rb[None]) @ self.R
            v = ref_quants.kv_v4nl_roundtrip((v @ self.R.T).astype(np.float32)) @ self.R
        elif self.R is not None:
            # rotate each head vector (x -> R x), quantize as k8v4, rotate back
            k = ref_quants.kv_q8_0_roundtrip((k @ self.R.T).astype(np.float32)) @ self.R
            v = ref_quants.kv_q4_0_roundtrip((v @ self.R.T).astype(np.float32)) @ self.R
        elif self.mode == "f16":
            k = k.astype(np.float32).astype(np.float16).astype(np.float64)
            v = v.astype(np.float32).astype(np.float16).astype(np.float64)
        elif self.mode == "k8v4":
            # Blocks of 32 run along head_dim inside one head (3.5); the engine
            # works in float32, so the values are rounded to float32 first.
            k = ref_quants.kv_q8_0_roundtrip(k.astype(np.float32)).astype(np.float64)
            v = ref_quants.kv_q4_0_roundtrip(v.astype(np.float32)).astype(np.float64)
        self.k[il] = np.concatenate([self.k[il], k], axis=0)
        self.v[il] = np.concatenate([self.v[il], v], axis=0)
        return self.k[il], self.v[il]


def attention(m, q, kall, vall, pos, window=0):
    """q: [n, H, hd] at positions pos; kall/vall: [T, Hkv, hd] for positions 0..T-1;
    window > 0: a query at p sees only keys t > p - window."""
    group = m.n_head // m.n_head_kv
    kx = np.repeat(kall, group, axis=1)                        # head h reads kv head h // group
    vx = np.repeat(vall, group, axis=1)
    s = np.einsum("nhd,thd->hnt", q, kx) * m.attn_scale        # [H, n, T]
    T = kall.shape[0]
    mask = np.arange(T)[None, :] > np.asarray(pos)[:, None]    # causal: key pos > query pos
    if window > 0:
        mask |= np.arange(T)[None, :] <= np.asarray(pos)[:, None] - window
    s = np.where(mask[None], -np.inf, s)
    s = s - s.max(axis=2, keepdims=True)
    pr = np.exp(s)
    pr /= pr.sum(axis=2, keepdims=True)
    return np.einsum("hnt,thd->nhd", pr, vx)                   # [n, H, hd]


def forward(m, cache, tokens, start):
    """Run tokens (ids) at positions start.. through the model; logits [n, vocab]."""
    n = len(tokens)
    pos = np.arange(start, start + n)
    x = m.w("token_embd.weight")[np.asarray(tokens)]         # [n, D]
    if m.gemma3:
        x = x * float(np.float32(np.sqrt(np.float32(m.n_embd))))
    H, Hkv, hd = m.n_head, m.n_head_kv, m.head_dim
    for il in range(m.n_layer):
        p = "blk.%d." % il
        xn = rmsnorm(x, m.w(p + "attn_norm.weight"), m.eps)
        q = linear(m, xn, p + "attn_q").reshape(n, H, hd)
        k = linear(m, xn, p + "attn_k").reshape(n, Hkv, hd)
        v = linear(m, xn, p + "attn_v").reshape(n, Hkv, hd)
        if m.qk_norm:
            q = rmsnorm(q, m.w(p + "attn_q_norm.weight"), m.eps)
            k = rmsnorm(k, m.w(p + "attn_k_norm.weight"), m.eps)
        win = layer_window(m, il)
        q = rope(m, q, pos, local=win > 0)
        k = rope(m, k, pos, local=win > 0)
        kall, vall = cache.append(il, k, v)
        a = attention(m, q, kall, vall, pos, win).reshape(n, H * hd)
        o = linear(m, a, p + "attn_output")
        if m.gemma3:
            o = rmsnorm(o, m.w(p + "post_attention_norm.weight"), m.eps)
        x = x + o
        hn = rmsnorm(x, m.w(p + "ffn_norm.weight"), m.eps)
        f = ffn_moe(m, p, hn) if m.n_expert > 0 else ffn_dense(m, p, hn)
        if m.gemma3:
            f = rmsnorm(f, m.w(p + "post_ffw_norm.weight"), m.eps)
        x = x + f
    xn = rmsnorm(x, m.w("output_norm.weight"), m.eps)
    out = m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
    logits = xn @ out.T
    if m.softcap > 0:
        logits = m.softcap * np.tanh(logits / m.softcap)
    return logits


def main(argv=None):
    ap = argparse.ArgumentParser(description="float64 reference forward pass (see module doc)")
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--kv", choices=("f64", "f16", "k8v4", "k8v4r", "k8v4r2"), default="f64")
    ap.add_argument("--logits-out")
    ap.add_argument("--print-top", type=int, default=0)
    ap.add_argument("--last", action="store_true", help="only the last position")
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--stats", action="store_true")
    ap.add_argument("--time", action="store_true", help="print timings to stderr")
    a = ap.parse_args(argv)

    t0 = time.time()
    m = Model(a.model)
    toks = [int(t) for t in a.tokens.replace(" ", "").split(",") if t != ""]
    if not toks:
        ap.error("--tokens is empty")
    bad = [t for t in toks if t < 0 or t >= m.n_vocab]
    if bad:
        ap.error("token id %d outside 0..%d" % (bad[0], m.n_vocab - 1))
    cache = KVCache(m, a.kv)
    logits = [forward(m, cache, toks, 0)]
    t1 = time.time()
    gen = []
    if a.greedy > 0:
        nxt = int(np.argmax(logits[-1][-1]))
        gen.append(nxt)
        while len(gen) < a.greedy:
            logits.append(forward(m, cache, [nxt], len(toks) + len(gen) - 1))
            nxt = int(np.argmax(logits[-1][-1]))
            gen.append(nxt)
    L = np.concatenate(logits, axis=0)
    if a.last:
        L = L[-1:]
    t2 = time.time()
    if a.time:
        print("time: load+prompt %.2fs, greedy %.2fs" % (t1 - t0, t2 - t1), file=sys.stderr)

    if a.logits_out:
        np.save(a.logits_out, L)
    if a.print_top > 0:
        first = (len(toks) + max(0, len(gen) - 1)) - L.shape[0]
        for i, row in enumerate(L):
            top = np.argsort(-row, kind="stable")[:a.print_top]
            print("pos %d: %s" % (first + i, " ".join("%d:%.6f" % (t, row[t]) for t in top)))
    if a.greedy > 0:
        print("greedy: " + " ".join(str(t) for t in gen))
    if a.stats:
        sd = L.std(axis=1)
        print("stats: positions=%d vocab=%d finite=%d std_min=%.6g std_max=%.6g" %
              (L.shape[0], L.shape[1], int(np.isfinite(L).all()), sd.min(), sd.max()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
