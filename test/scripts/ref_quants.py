"""ref_quants.py: the quantization pieces the float64 reference needs that the
python `gguf` package (0.19) does not provide, written in numpy from
doc/formats.md (not from strata's C code, so the two stay independent).

  * Q2_0 (ggml id 42, doc/formats.md 2.6): the package does not know the id at
    all, so GGUFReader refuses the file.  register_q2_0() teaches the enum and
    the size table the id; dequantize() below decodes it.
  * IQ3_XXS (id 18, 2.7): the package has a decoder; ours is used only if it
    is missing (and `--selftest` checks whichever one is used).
  * The k8v4 KV cache (3.1, 3.2): K as Q8_0 and V as Q4_0 per 32-element
    block, with ggml's recipes evaluated in float32 step by step, so the
    rounding matches what strata's cache stores.

`python3 ref_quants.py --selftest [testvectors.txt]` checks every decoder and
both KV recipes against the ggml-generated vectors in test/data/testvectors.txt.
"""
import os
import re
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import constants as gguf_constants

Q2_0_ID = 42
QK2_0 = 64


def register_q2_0():
    """Add Q2_0 (id 42, 64 elements / 18 bytes) to the gguf package's enum and
    size table if this version lacks it, so GGUFReader can open such files."""
    if Q2_0_ID in QT._value2member_map_:
        member = QT(Q2_0_ID)
    else:
        member = int.__new__(QT, Q2_0_ID)
        member._name_ = "Q2_0"
        member._value_ = Q2_0_ID
        QT._value2member_map_[Q2_0_ID] = member
        QT._member_map_["Q2_0"] = member
        QT._member_names_.append("Q2_0")
    gguf_constants.GGML_QUANT_SIZES.setdefault(member, (QK2_0, 18))
    if hasattr(gguf, "GGML_QUANT_SIZES"):
        gguf.GGML_QUANT_SIZES.setdefault(member, (QK2_0, 18))
    return member


register_q2_0()


def _fp16(raw):
    """raw: uint8 [..., 2] little-endian -> float32."""
    return np.ascontiguousarray(raw).view("<f2").astype(np.float32)


def dequant_q2_0(blocks):
    """blocks: uint8 [..., nb*18] -> float32 [..., nb*64].  2.6: code c of
    element j is bits 2(j%4).. of byte j/4; value (c - 1) * d."""
    shape = blocks.shape
    b = blocks.reshape(-1, 18)
    d = _fp16(b[:, 0:2])                                   # [n, 1]
    qs = b[:, 2:18]                                        # [n, 16]
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)
    codes = (qs[:, :, None] >> shifts[None, None, :]) & 3  # [n, 16, 4] -> j = 4*byte + k
    codes = codes.reshape(-1, 64).astype(np.float32)
    x = (codes - np.float32(1)) * d
    return x.reshape(*shape[:-1], shape[-1] // 18 * 64)


def _repo_file(*parts):
    """A file of the strata tree, found from this script's place in it."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", *parts)
    return path if os.path.isfile(path) else None


def _read_hex_table(path):
    """The 0x... values of a C include file (comments dropped)."""
    with open(path) as f:
        text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
    return [int(t, 16) for t in re.findall(r"0x[0-9a-fA-F]+", text)]


_IQ3 = {}


def _iq3_tables():
    if not _IQ3:
        gpath = _repo_file("model", "iq3xxs_grid.inc")
        grid = _read_hex_table(gpath) if gpath else None
        if not grid or len(grid) != 256:
            raise RuntimeError("IQ3_XXS grid table model/iq3xxs_grid.inc not found")
        g = np.array(grid, dtype=np.uint32)
        _IQ3["grid"] = np.stack([(g >> (8 * k)) & 255 for k in range(4)], axis=1).astype(np.float32)
        # 2.7: SIGNS[v] = v | parity(v) << 7
        signs = np.array([v | ((bin(v).count("1") & 1) << 7) for v in range(128)], dtype=np.uint8)
        _IQ3["signs"] = signs
    return _IQ3["grid"], _IQ3["signs"]


def dequant_iq3_xxs_np(blocks):
    """Our IQ3_XXS decoder (doc/formats.md 2.7), used when gguf lacks one."""
    grid, signs = _iq3_tables()
    shape = blocks.shape
    b = blocks.reshape(-1, 98)
    n = b.shape[0]
    d = _fp16(b[:, 0:2])[:, 0]                                   # [n]
    gidx = b[:, 2:66]                                            # [n, 64]
    ss = np.ascontiguousarray(b[:, 66:98]).view("<u4")           # [n, 8]
    ls = (ss >> 28).astype(np.float32)
    db = (d[:, None] * (np.float32(0.5) + ls)) * np.float32(0.5)  # [n, 8]
    mags = grid[gidx].reshape(n, 8, 4, 8)                         # [n, ib, l, k]
    sf = np.stack([(ss >> (7 * l)) & 127 for l in range(4)], axis=2)  # [n, 8, 4]
    sg = signs[sf]                                                 # [n, 8, 4]
    bits = (sg[..., None] >> np.arange(8, dtype=np.uint8)) & 1     # [n, 8, 4, 8]
    sgn = np.where(bits == 1, np.float32(-1), np.float32(1))
    x = db[:, :, None, None] * mags * sgn
    return x.reshape(*shape[:-1], shape[-1] // 98 * 256).astype(np.float32)


def dequantize(data, qtype):
    """Tensor bytes (as GGUFReader gives them) -> float32 with ne[0] last."""
    qid = int(qtype)
    if qid == Q2_0_ID:
        return dequant_q2_0(data)
    if qid == int(QT.IQ3_XXS):
        try:
            return gguf.quants.dequantize(data, QT.IQ3_XXS)
        except NotImplementedError:
            return dequant_iq3_xxs_np(data)
    return gguf.quants.dequantize(data, qtype)


# ---- k8v4 KV-cache simulation (doc/formats.md 3.1, 3.2, 3.5) -----------------
#
# Every step in float32, in the order ggml evaluates it; numpy float32 ops
# round each result to float32 and never contract into an FMA, like the
# reference C compiled without -ffp-contract.

def _roundf(v):
    """C roundf (ties away from zero) of float32 values.  |v| + 0.5 is formed
    in float64, where it is exact, so 0.49999997 does not round up."""
    a = np.floor(np.abs(v).astype(np.float64) + 0.5)
    return np.copysign(a, v).astype(np.float32)


def kv_q8_0_roundtrip(x):
    """Quantize rows of 32-blocks to Q8_0 and decode them again.
    x: [..., n] (n a multiple of 32) -> float32 of the same shape."""
    x = np.asarray(x, dtype=np.float32)
    shape = x.shape
    b = x.reshape(-1, 32)
    amax = np.max(np.abs(b), axis=1)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = _roundf(b * idv[:, None])
    dh = d.astype(np.float16).astype(np.float32)
    return (q * dh[:, None]).reshape(shape)


def kv_q4_0_roundtrip(x):
    """Quantize rows of 32-blocks to Q4_0 (ggml reference recipe) and decode."""
    x = np.asarray(x, dtype=np.float32)
    shape = x.shape
    b = x.reshape(-1, 32)
    imax = np.argmax(np.abs(b), axis=1)          # first of equal maxima wins
    v = b[np.arange(b.shape[0]), imax]
    d = v / np.float32(-8)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    t = b * idv[:, None] + np.float32(8.5)
    code = np.minimum(np.float32(15), np.trunc(t))
    dh = d.astype(np.float16).astype(np.float32)
    return ((code - np.float32(8)) * dh[:, None]).reshape(shape)


IQ4NL_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
                         1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)
_NL_MID = ((IQ4NL_LEVELS[:-1] + IQ4NL_LEVELS[1:]) / 2).astype(np.float32)


def _nl_code(r):
    """Index of the nearest IQ4_NL level (the lower on a tie); NaN -> 8."""
    c = np.sum(r[..., None] > _NL_MID, axis=-1)
    return np.where(np.isnan(r), 8, c)


def _sum32_butterfly(a):
    """Sum of the last axis (32) in the order of a warp's xor butterfly,
    as kernels/cpu/kv.c's kv_sum32 (float32 adds)."""
    a = np.array(a, dtype=np.float32)
    off = 16
    while off:
        a[..., :off] = a[..., :off] + a[..., off:2 * off]
        off //= 2
    return a[..., 0]


def fp16_keep7(h):
    """fp16 values rounded to 7 significant bits, as kernels/cpu/kv.c's
    fp16_keep7: the low 4 mantissa bits rounded off (half to even) on the
    bit pattern; a finite value never becomes Inf."""
    bits = np.asarray(h, dtype=np.float16).view(np.uint16).astype(np.uint32)
    mag = bits & 0x7fff
    r = (mag + 7 + ((mag >> 4) & 1)) & ~np.uint32(0xf)
    r = np.where(r >= 0x7c00, 0x7bf0, r)
    r = np.where(mag >= 0x7c00, mag, r)
    return ((bits & 0x8000) | r).astype(np.uint16).view(np.float16)


def kv_v4nl_roundtrip(x):
    """V of the k8v4r2 cache: 32-blocks coded into the IQ4_NL levels with the
    scale search of cpu_quant_v4nl (kernels/cpu/kv.c), its fp16 scale kept to
    7 significant bits and at most 56.5 in magnitude, decoded again.  Every
    step in float32 in the C's order, so the codes match strata's."""
    x = np.asarray(x, dtype=np.float32)
    shape = x.shape
    b = x.reshape(-1, 32)
    absb = np.where(np.isnan(b), np.float32(0), np.abs(b))
    imax = np.argmax(absb, axis=1)
    mx = b[np.arange(b.shape[0]), imax]
    amax = absb[np.arange(b.shape[0]), imax]
    ok = (amax > 0) & (amax <= np.float32(3.0e38))
    safe = np.where(ok, mx, np.float32(1)).astype(np.float32)
    best = np.full(b.shape[0], np.float32(-1))
    db = np.zeros(b.shape[0], dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for t in range(-7, 8):
            idv = (np.float32(t - 127) / safe).astype(np.float32)
            lv = IQ4NL_LEVELS[_nl_code((b * idv[:, None]).astype(np.float32))]
            px = np.where(np.isnan(b), np.float32(0), lv * b).astype(np.float32)
            sqq = np.sum(lv.astype(np.int64) ** 2, axis=1).astype(np.float32)
            sqx = _sum32_butterfly(px)
            dt = (sqx / sqq).astype(np.float32)
            score = (dt * sqx).astype(np.float32)
            better = ok & (score > best)
            best = np.where(better, score, best)
            db = np.where(better, dt, db)
    dh = fp16_keep7(db.astype(np.float16))
    # at most 56.5 in magnitude (KV_NL_DMAX, 0x5310), as kv_nl_scale
    dh = np.clip(dh.astype(np.float32), np.float32(-56.5), np.float32(56.5))
    with np.errstate(divide="ignore"):
        idv = np.where(dh != 0, np.float32(1) / np.where(dh != 0, dh, 1), 0).astype(np.float32)
    code = _nl_code((b * idv[:, None]).astype(np.float32))
    return (dh[:, None] * IQ4NL_LEVELS[code]).astype(np.float32).reshape(shape)


def kv_q8_0_bytes(x):
    """Packed Q8_0 blocks of x (for the self-test)."""
    b = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    amax = np.max(np.abs(b), axis=1)
    d = amax / np.float32(127)
    idv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    q = _roundf(b * idv[:, None]).astype(np.int8)
    out = bytearray()
    for i in range(b.shape[0]):
        out += d[i].astype(np.float16).tobytes() + q[i].tobytes()
    return bytes(out)


def kv_q4_0_bytes(x):
    b = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    out = bytearray()
    for blk in b:
        v = blk[np.argmax(np.abs(blk))]
        d = v / np.float32(-8)
        idv = np.float32(1) / d if d != 0 else np.float32(0)
        code = np.minimum(np.float32(15), np.trunc(blk * idv + np.float32(8.5))).astype(np.uint8)
        qs = code[:16] | (code[16:] << 4)
        out += np.float32(d).astype(np.float16).tobytes() + qs.tobytes()
    return bytes(out)


# ---- self-test against test/data/testvectors.txt -------------------------

def selftest(path=None):
    if path is None:
        path = _repo_file("test", "data", "testvectors.txt")
        if not path:
            print("selftest: test/data/testvectors.txt not found")
            return 2
    types = {"q8_0": QT.Q8_0, "q4_0": QT.Q4_0, "q4_1": QT.Q4_1, "q5_0": QT.Q5_0,
             "q5_1": QT.Q5_1, "iq4_nl": QT.IQ4_NL, "q4_K": QT.Q4_K, "q6_K": QT.Q6_K,
             "iq3_xxs": QT.IQ3_XXS, "q2_0": QT(Q2_0_ID)}
    cases, cur = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            tok = line.split()
            if tok[0] == "case":
                cur = {"kind": tok[1], "type": tok[2], "n": int(tok[3])}
                cases.append(cur)
            else:
                cur[tok[0]] = tok[1:]
    ok = bad = skipped = 0
    for c in cases:
        name = "%s %s" % (c["kind"], c["type"])
        if c["kind"] == "dequant" and c["type"] in types:
            raw = np.frombuffer(bytes.fromhex(c["bytes"][0]), dtype=np.uint8)
            got = dequantize(raw.reshape(1, -1), types[c["type"]]).reshape(-1)
            want = np.array([float(v) for v in c["out"]], dtype=np.float32)
            good = np.array_equal(got.view(np.uint32) & 0x7FFFFFFF, want.view(np.uint32) & 0x7FFFFFFF) \
                and np.array_equal(got, want)
            if c["type"] == "iq3_xxs":  # also our own decoder
                good = good and np.array_equal(dequant_iq3_xxs_np(raw.reshape(1, -1)).reshape(-1), want)
        elif c["kind"] == "quant" and c["type"] in ("q8_0", "q4_0") and "imatrix" not in c:
            x = np.array([float(v) for v in c["in"]], dtype=np.float32)
            want = bytes.fromhex(c["bytes"][0])
            got = kv_q8_0_bytes(x) if c["type"] == "q8_0" else kv_q4_0_bytes(x)
            good = got == want
            # and the round trip equals decoding those bytes
            rt = kv_q8_0_roundtrip(x) if c["type"] == "q8_0" else kv_q4_0_roundtrip(x)
            dec = dequantize(np.frombuffer(want, dtype=np.uint8).reshape(1, -1), types[c["type"]]).reshape(-1)
            good = good and np.array_equal(rt, dec)
        else:
            skipped += 1
            continue
        if good:
            ok += 1
        else:
            bad += 1
            print("selftest FAIL:", name)
    print("selftest: %d ok, %d failed, %d not applicable" % (ok, bad, skipped))
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--selftest":
        sys.exit(selftest(sys.argv[2] if len(sys.argv) > 2 else None))
    print(__doc__)
    sys.exit(2)
