#!/usr/bin/env python3
"""make_corpus.py: write the fuzz seed corpus (test/fuzz/corpus/*.bin).

Seeds are small valid GGUF files written with the Python `gguf` package (an
independent writer), plus one truncated copy, so the fuzzer starts from
inputs that reach every part of the reader: every value type, string
arrays, tensors of several block sizes, a non-default alignment.  They are
named *.bin because *.gguf is git-ignored.  Re-running rewrites them
byte-identically.

    python3 test/fuzz/make_corpus.py [OUTDIR]
"""
import os
import struct
import sys

import numpy as np
import gguf

Q = gguf.GGMLQuantizationType


def rng_bytes(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def write(path, fill, alignment=None):
    w = gguf.GGUFWriter(path, "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def every_type(w):
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "hello")
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", -0.25)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_array("t.arr_f32", [0.5, 2.0])
    w.add_tensor("a.f32", np.arange(8, dtype=np.float32))
    w.add_tensor("b.q8_0", rng_bytes(2 * 34, 1), raw_dtype=Q.Q8_0)


def quant_types(w):
    w.add_uint32("llama.block_count", 1)
    w.add_tensor("q4_0", rng_bytes(2 * 18, 2).reshape(2, 18), raw_dtype=Q.Q4_0)
    w.add_tensor("q4_1", rng_bytes(20, 3), raw_dtype=Q.Q4_1)
    w.add_tensor("f16", np.ones((2, 4), dtype=np.float16))
    w.add_tensor("q4_k", rng_bytes(144, 4), raw_dtype=Q.Q4_K)


def empty(w):
    pass


def raw_gguf(tensors, data_sizes, alignment=32):
    """A GGUF v3 file written by hand, for types the Python package does not
    know (Q2_0, id 42): tensors = [(name, type_id, ne)], data_sizes = bytes
    given to each tensor's data (before padding)."""
    def s(b):
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1)
    out += s(b"general.architecture") + struct.pack("<I", 8) + s(b"llama")
    offset = 0
    for (name, tid, ne), size in zip(tensors, data_sizes):
        out += s(name.encode()) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        out += struct.pack("<IQ", tid, offset)
        offset += size + (-size % alignment)
    out += b"\0" * (-len(out) % alignment)
    for i, size in enumerate(data_sizes):
        out += bytes(rng_bytes(size, 10 + i)) + b"\0" * (-size % alignment)
    return out


def main(argv):
    out = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "every_type.bin"), every_type)
    write(os.path.join(out, "quant_align64.bin"), quant_types, alignment=64)
    write(os.path.join(out, "empty.bin"), empty)
    # Q2_0 (§2.6): 2048 elements are 576 bytes upstream (group 64) and 544
    # bytes in the group-128 fork layout; the second seed must be refused.
    q2 = [("blk.0.attn_q.weight", 42, (2048, 1)), ("output_norm.weight", 0, (8,))]
    with open(os.path.join(out, "q2_0.bin"), "wb") as f:
        f.write(raw_gguf(q2, [576, 32]))
    with open(os.path.join(out, "q2_0_group128.bin"), "wb") as f:
        f.write(raw_gguf(q2, [544, 32]))
    with open(os.path.join(out, "every_type.bin"), "rb") as f:
        data = f.read()
    with open(os.path.join(out, "truncated.bin"), "wb") as f:
        f.write(data[: len(data) // 2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
