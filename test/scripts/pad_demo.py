#!/usr/bin/env python3
"""pad_demo.py IN.gguf OUT.gguf: an exactly equivalent copy of the demo model
(SmolLM2-135M, llama: n_embd 576, 9 query heads and 3 KV heads of 64) whose
rows are multiples of 256, so that the 256-element block types of the
quantization recipes apply to real weights (doc/perplexity.md).

 - n_embd 576 -> 768: every matrix that reads the residual stream gets 192
   zero input columns, every matrix that writes it 192 zero output rows, and
   the embedding 192 zero columns; the residual's extra channels stay 0.
 - 9 -> 12 query heads: a zero head is added to each KV group, after its
   three heads (old head h -> 4*(h//3) + h%3), so every group keeps its
   heads and their KV head; attn_output reads the added heads through zero
   columns, so their (non-zero) attention output is never used.
 - RMSNorm divides by the root mean square over 768 channels, 192 of them
   0: norm weights are scaled by sqrt(576/768) and the epsilon by 576/768,
   which gives the same normalised values as the original up to rounding.
The weights are moved as whole blocks (Q4_1, Q8_0: 32 values a block; a head
is 2 blocks wide), never decoded: an all-zero block decodes to zeros."""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

D0, D1, H0, H1, KV, HD, BLK = 576, 768, 9, 12, 3, 64, 32


def new_head(h):
    g, p = divmod(h, H0 // KV)
    return g * (H1 // KV) + p


def blocks(t):
    """Tensor bytes as [rows, blocks, block bytes]."""
    bs = {Q.Q4_1: 20, Q.Q8_0: 34, Q.Q4_0: 18}[t.tensor_type]
    a = np.asarray(t.data, dtype=np.uint8)
    rows = int(np.prod(t.shape[1:]))
    return a.reshape(rows, int(t.shape[0]) // BLK, bs)


def pad_cols(b, n_blocks):
    out = np.zeros((b.shape[0], n_blocks, b.shape[2]), np.uint8)
    out[:, : b.shape[1]] = b
    return out


def main(src, dst):
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    assert arch == "llama", arch
    w = gguf.GGUFWriter(dst, arch)
    for f in r.fields.values():
        k = f.name
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        val = f.contents()
        if k == "llama.embedding_length":
            assert val == D0
            val = D1
        elif k == "llama.attention.head_count":
            assert val == H0
            val = H1
        elif k == "llama.attention.layer_norm_rms_epsilon":
            val = float(np.float32(val) * np.float32(D0 / D1))
        elif k == "general.name":
            val = str(val) + " (padded to n_embd 768, 12 heads)"
        vt = f.types[0]
        w.add_key_value(k, val, vt, f.types[-1] if vt == V.ARRAY else None)
    scale = np.float32(np.sqrt(D0 / D1))
    for t in r.tensors:
        name = t.name
        if t.tensor_type == Q.F32:
            x = np.asarray(t.data, np.float32).reshape(-1)
            assert x.size == D0, name
            y = np.zeros(D1, np.float32)
            y[:D0] = x * scale
            w.add_tensor(name, y)
            continue
        b = blocks(t)
        if name == "token_embd.weight" or name.endswith(
                ("attn_k.weight", "attn_v.weight", "ffn_gate.weight", "ffn_up.weight")):
            out = pad_cols(b, D1 // BLK)
        elif name.endswith("attn_q.weight"):
            b = pad_cols(b, D1 // BLK)
            out = np.zeros((H1 * HD,) + b.shape[1:], np.uint8)
            for h in range(H0):
                out[new_head(h) * HD:(new_head(h) + 1) * HD] = b[h * HD:(h + 1) * HD]
        elif name.endswith("attn_output.weight"):
            per = HD // BLK
            out = np.zeros((D1, H1 * per, b.shape[2]), np.uint8)
            for h in range(H0):
                out[:D0, new_head(h) * per:(new_head(h) + 1) * per] = b[:, h * per:(h + 1) * per]
        elif name.endswith("ffn_down.weight"):
            out = np.zeros((D1,) + b.shape[1:], np.uint8)
            out[:D0] = b
        else:
            raise SystemExit("pad_demo: unexpected tensor " + name)
        w.add_tensor(name, out.reshape(out.shape[0], -1), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: pad_demo.py IN.gguf OUT.gguf")
    main(sys.argv[1], sys.argv[2])
