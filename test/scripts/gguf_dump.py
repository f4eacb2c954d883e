#!/usr/bin/env python3
"""gguf_dump.py: dump a GGUF file with the Python `gguf` package's reader.

An independent oracle for strata's own reader (model/gguf.c): the tests parse
the same file with both and compare header, keys, types, values, tensor names,
types, shapes and offsets.

    gguf_dump.py FILE            JSON (everything, values in full)
    gguf_dump.py FILE --tsv      one tab-separated line per item, for C tests:
        header  version|alignment|data_offset|n_kv|n_tensors  VALUE
        kv      KEY  TYPE  VALUE
        tensor  NAME  TYPE_ID  NE0,NE1,..  OFFSET  NBYTES

In --tsv, VALUE is: integers in decimal; BOOL 0/1; FLOAT32/FLOAT64 as the hex
of their IEEE bits (exact, no printing round-off); STRING as LEN:FNV; ARRAY as
ELEMTYPE:COUNT:FNV.  FNV is FNV-1a 64 (16 hex digits) over the decoded value
re-encoded little-endian: numeric elements as their bytes, strings as their
UTF-8 bytes each preceded by a u64 length.  OFFSET is relative to the data
section, as in the tensor record.  Exit 1 with a message if the file cannot
be read.
"""
import json
import struct
import sys

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a(data, h=FNV_OFFSET):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def field_value(gguf, field):
    """Decoded value of a ReaderField: a Python scalar, str, or list."""
    vt = gguf.GGUFValueType
    t = field.types[0]
    if t == vt.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", errors="surrogateescape")
    if t == vt.ARRAY:
        et = field.types[1] if len(field.types) > 1 else None
        if et == vt.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="surrogateescape") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    return field.parts[field.data[0]].tolist()[0]


def elem_bytes(gguf, t, v):
    """Little-endian encoding of one decoded value of type t."""
    vt = gguf.GGUFValueType
    fmt = {vt.UINT8: "<B", vt.INT8: "<b", vt.UINT16: "<H", vt.INT16: "<h",
           vt.UINT32: "<I", vt.INT32: "<i", vt.FLOAT32: "<f", vt.BOOL: "<B",
           vt.UINT64: "<Q", vt.INT64: "<q", vt.FLOAT64: "<d"}
    if t == vt.STRING:
        b = v.encode("utf-8", errors="surrogateescape")
        return struct.pack("<Q", len(b)) + b
    return struct.pack(fmt[t], int(v) if t == vt.BOOL else v)


def tsv_value(gguf, field, value):
    vt = gguf.GGUFValueType
    t = field.types[0]
    if t == vt.ARRAY:
        et = field.types[1] if len(field.types) > 1 else vt.UINT8
        h = FNV_OFFSET
        for v in value:
            h = fnv1a(elem_bytes(gguf, et, v), h)
        return "%s:%d:%016x" % (et.name, len(value), h)
    if t == vt.STRING:
        b = value.encode("utf-8", errors="surrogateescape")
        return "%d:%016x" % (len(b), fnv1a(b))
    if t == vt.FLOAT32:
        return "%08x" % struct.unpack("<I", struct.pack("<f", value))[0]
    if t == vt.FLOAT64:
        return "%016x" % struct.unpack("<Q", struct.pack("<d", value))[0]
    if t == vt.BOOL:
        return "1" if value else "0"
    return str(int(value))


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    try:
        import gguf
        reader = gguf.GGUFReader(argv[1], "r")
    except Exception as e:  # the oracle's own failure is reported, not hidden
        print("gguf_dump.py: %s: %s" % (argv[1], e), file=sys.stderr)
        return 1
    tsv = "--tsv" in argv[2:]
    fields = list(reader.fields.values())
    # The Python reader lists the header as three pseudo-fields first.
    header = {f.name.split(".", 1)[1]: int(field_value(gguf, f)) for f in fields[:3]}
    kvs = fields[3:]
    data_offset = int(reader.data_offset)
    tensors = []
    for t in reader.tensors:
        tensors.append({
            "name": t.name,
            "type": int(t.tensor_type),
            "type_name": t.tensor_type.name,
            "shape": [int(x) for x in t.shape],
            "offset": int(t.data_offset) - data_offset,
            "n_bytes": int(t.n_bytes),
        })
    if tsv:
        out = sys.stdout
        out.write("header\tversion\t%d\n" % header["version"])
        out.write("header\talignment\t%d\n" % reader.alignment)
        out.write("header\tdata_offset\t%d\n" % data_offset)
        out.write("header\tn_kv\t%d\n" % header["kv_count"])
        out.write("header\tn_tensors\t%d\n" % header["tensor_count"])
        for f in kvs:
            v = field_value(gguf, f)
            out.write("kv\t%s\t%s\t%s\n" % (f.name, f.types[0].name, tsv_value(gguf, f, v)))
        for t in tensors:
            out.write("tensor\t%s\t%d\t%s\t%d\t%d\n" % (
                t["name"], t["type"], ",".join(str(x) for x in t["shape"]), t["offset"], t["n_bytes"]))
        return 0
    doc = {
        "file": argv[1],
        "version": header["version"],
        "alignment": int(reader.alignment),
        "data_offset": data_offset,
        "n_kv": header["kv_count"],
        "n_tensors": header["tensor_count"],
        "kv": [],
        "tensors": tensors,
    }
    for f in kvs:
        item = {"key": f.name, "type": f.types[0].name, "value": field_value(gguf, f)}
        if f.types[0] == gguf.GGUFValueType.ARRAY and len(f.types) > 1:
            item["elem_type"] = f.types[1].name
        doc["kv"].append(item)
    json.dump(doc, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
