#!/usr/bin/env python3
"""quant_check.py: an independent oracle for strata's quant formats.

Dequantizes with the Python `gguf` package (gguf.quants.dequantize), never
with strata, and compares against what strata produced.  Used by
test/test_quant.c; also handy by hand.

  quant_check.py compare TYPE BLOCKS.bin STRATA.f32
      dequantize the raw blocks of TYPE with gguf and require strata's f32
      output to be bit-identical; prints 'ok TYPE N' or the first mismatch.
  quant_check.py extract MODEL.gguf TENSOR OUT.bin
      write a tensor's raw bytes; prints 'TYPE_ID NE0 NROWS'.
  quant_check.py check-file FILE.gguf [SOURCE.gguf]
      load FILE with gguf.GGUFReader, dequantize every tensor, print per type
      counts; with SOURCE, also print RMSE/||w|| of every tensor against the
      source's dequantized values, per output type.

Q2_0 (ggml id 42, July 2026) is newer than the installed gguf package (0.19.0
knows ids up to 41, Q1_0): for it this script registers the id with the
reader (block 64, 18 bytes) and dequantizes with numpy straight from
doc/formats.md §2.6: x = (code - 1) * d, code j at bits 2*(j%4) of byte j/4.
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

Q2_0_ID = 42


def ensure_q2_0():
    """Teach gguf's enum and size table about id 42 if it does not know it."""
    try:
        return T(Q2_0_ID), False
    except ValueError:
        pass
    m = int.__new__(T, Q2_0_ID)
    m._name_ = "Q2_0"
    m._value_ = Q2_0_ID
    T._value2member_map_[Q2_0_ID] = m
    T._member_map_["Q2_0"] = m
    gguf.GGML_QUANT_SIZES[m] = (64, 18)
    return m, True


Q2_0, Q2_0_SHIM = ensure_q2_0()


def dequant_q2_0(raw):
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 18)
    d = b[:, :2].copy().view(np.float16).astype(np.float32)  # (nb, 1)
    qs = b[:, 2:]
    codes = (qs[:, :, None] >> np.array([0, 2, 4, 6], dtype=np.uint8)) & 3
    codes = codes.reshape(-1, 64).astype(np.float32)
    return ((codes - np.float32(1)) * d).reshape(-1)


def type_by_name(name):
    name = name.upper()
    if name == "Q2_0":
        return Q2_0
    return T[name]


def dequant(raw, qtype):
    if int(qtype) == Q2_0_ID and Q2_0_SHIM:
        return dequant_q2_0(raw)
    if qtype == T.F32:
        return np.frombuffer(raw, dtype=np.float32).copy()
    if qtype == T.F16:
        return np.frombuffer(raw, dtype=np.float16).astype(np.float32)
    arr = np.frombuffer(raw, dtype=np.uint8)
    return np.asarray(gguf.quants.dequantize(arr, qtype), dtype=np.float32).reshape(-1)


def cmd_compare(tname, blocks_path, f32_path):
    qtype = type_by_name(tname)
    ref = dequant(open(blocks_path, "rb").read(), qtype)
    got = np.fromfile(f32_path, dtype=np.float32)
    if ref.shape != got.shape:
        print(f"FAIL {tname}: gguf gives {ref.size} values, strata {got.size}")
        return 1
    bad = np.nonzero(ref.view(np.uint32) != got.view(np.uint32))[0]
    # -0.0 vs +0.0 is the only difference allowed: numpy and C agree on
    # values, but (q - 8) * d with q - 8 == 0 and d < 0 gives -0 in both
    bad = [i for i in bad if not (ref[i] == 0 and got[i] == 0)]
    if bad:
        i = bad[0]
        print(f"FAIL {tname}: {len(bad)} of {ref.size} differ; first at {i}: "
              f"gguf {ref[i]!r} strata {got[i]!r}")
        return 1
    print(f"ok {tname} {ref.size}" + (" (numpy doc/formats.md formula: gguf lacks id 42)"
                                       if int(qtype) == Q2_0_ID and Q2_0_SHIM else ""))
    return 0


def tensor_bytes(t):
    return np.asarray(t.data).tobytes()


def cmd_extract(model, name, out):
    r = gguf.GGUFReader(model)
    for t in r.tensors:
        if t.name == name:
            raw = tensor_bytes(t)
            open(out, "wb").write(raw)
            ne0 = int(t.shape[0])
            nrows = int(np.prod(t.shape[1:])) if len(t.shape) > 1 else 1
            print(int(t.tensor_type), ne0, nrows)
            return 0
    print(f"no tensor {name} in {model}", file=sys.stderr)
    return 1


def cmd_check_file(path, source=None):
    r = gguf.GGUFReader(path)
    src = {}
    if source:
        for t in gguf.GGUFReader(source).tensors:
            src[t.name] = t
    per_type = {}
    for t in r.tensors:
        x = dequant(tensor_bytes(t), t.tensor_type)
        n = int(np.prod(t.shape))
        if x.size != n or not np.all(np.isfinite(x)):
            print(f"FAIL {t.name}: {x.size} values for {n} elements or non-finite")
            return 1
        e = per_type.setdefault(t.tensor_type.name, [0, 0, 0.0, 0.0])
        e[0] += 1
        e[1] += n
        if t.name in src:
            w = dequant(tensor_bytes(src[t.name]), src[t.name].tensor_type).astype(np.float64)
            e[2] += float(np.sum((x - w) ** 2))
            e[3] += float(np.sum(w ** 2))
    for name, (nt, n, se, sw) in sorted(per_type.items()):
        rel = f" rmse/||w|| {np.sqrt(se / sw):.4f}" if sw > 0 else ""
        print(f"type {name}: {nt} tensors, {n} elements{rel}")
    print(f"ok {len(r.tensors)} tensors" + (" (Q2_0 via shim)" if Q2_0_SHIM else ""))
    return 0


def main(argv):
    if len(argv) >= 5 and argv[1] == "compare":
        return cmd_compare(argv[2], argv[3], argv[4])
    if len(argv) >= 5 and argv[1] == "extract":
        return cmd_extract(argv[2], argv[3], argv[4])
    if len(argv) >= 3 and argv[1] == "check-file":
        return cmd_check_file(argv[2], argv[3] if len(argv) > 3 else None)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
