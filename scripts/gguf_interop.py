#!/usr/bin/env python3
"""Interoperability checks between laya-format and the reference `gguf` Python package.

Run by crates/laya-format/tests/interop.rs (needs the environment of scripts/setup-python.sh):

  gguf_interop.py read FILE OUTDIR
      Reads any GGUF file with gguf.GGUFReader and dumps what it sees: OUTDIR/kv.json (every
      field with its value types and value), OUTDIR/tensors.json (name, type id, shape in ne
      order, byte size, absolute data offset) and, per tensor i, OUTDIR/t{i}.raw (the stored
      bytes) and OUTDIR/t{i}.f32 (gguf.quants.dequantize of them, little-endian float32).

  gguf_interop.py write OUTDIR
      Writes a Laya model with gguf.GGUFWriter (tensors of every Laya type, quantised by
      gguf.quants), patches laya.checksum as docs/format.md §6 says, and dumps what it wrote:
      OUTDIR/model.laya, OUTDIR/expected.json (keys and tensor list) and per tensor i
      OUTDIR/w{i}.raw (stored bytes), OUTDIR/w{i}.src (float32 values before encoding) and
      OUTDIR/w{i}.f32 (gguf.quants.dequantize of the stored bytes).
"""

import json
import os
import struct
import sys

import numpy as np
import xxhash
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT


def dump_reader(path, outdir):
    reader = gguf.GGUFReader(path)
    fields = []
    for name, field in reader.fields.items():
        types = [t.name for t in field.types]
        value = field.contents()
        if isinstance(value, (bytes, bytearray)):
            value = list(value)
        fields.append({"name": name, "types": types, "value": value})
    tensors = []
    for i, t in enumerate(reader.tensors):
        raw = np.asarray(t.data)
        with open(os.path.join(outdir, f"t{i}.raw"), "wb") as f:
            f.write(raw.tobytes())
        deq = gguf.quants.dequantize(raw, t.tensor_type)
        with open(os.path.join(outdir, f"t{i}.f32"), "wb") as f:
            f.write(np.asarray(deq, dtype="<f4").tobytes())
        tensors.append({
            "name": t.name,
            "type": int(t.tensor_type),
            "shape": [int(x) for x in t.shape],
            "n_bytes": int(t.n_bytes),
            "n_elements": int(t.n_elements),
            "data_offset": int(t.data_offset),
        })
    with open(os.path.join(outdir, "kv.json"), "w", encoding="utf-8") as f:
        json.dump({"alignment": int(reader.alignment), "data_offset": int(reader.data_offset),
                   "fields": fields}, f, ensure_ascii=False)
    with open(os.path.join(outdir, "tensors.json"), "w", encoding="utf-8") as f:
        json.dump(tensors, f)


def patch_checksum(path):
    """docs/format.md §6: XXH3-64 of the file with the checksum value bytes read as zero."""
    field = gguf.GGUFReader(path).fields["laya.checksum"]
    key = "laya.checksum".encode()
    # A field starts with its key (u64 length + bytes), then the u32 value type, then the value.
    value_at = field.offset + 8 + len(key) + 4
    with open(path, "rb") as f:
        data = bytearray(f.read())
    assert struct.unpack_from("<I", data, value_at - 4)[0] == VT.UINT64
    data[value_at:value_at + 8] = b"\0" * 8
    digest = xxhash.xxh3_64_intdigest(bytes(data))
    data[value_at:value_at + 8] = struct.pack("<Q", digest)
    with open(path, "wb") as f:
        f.write(data)
    return digest


def write_model(outdir):
    rng = np.random.default_rng(20250101)
    T, d, H, C = 16, 32, 2, 8
    ffn = [64, 32]
    words = ["的", "12月", "hello", "中国", "😀", "👍🏽", "naïve", "東京", "你好", "world", "🙂🙂", "x"]
    freqs = [1000 - 10 * i for i in range(len(words))]
    cps = sorted({ord(c) for w in words for c in w} | set(range(0x61, 0x7B)))
    R = len(cps) + 2
    V = len(words)

    path = os.path.join(outdir, "model.laya")
    w = gguf.GGUFWriter(path, arch="laya")
    w.add_custom_alignment(64)
    w.add_string("general.name", "laya-python-interop")
    w.add_uint32("laya.format_version", 1)
    w.add_uint32("laya.context_length", T)
    w.add_uint32("laya.embedding_length", d)
    w.add_uint32("laya.block_count", len(ffn))
    w.add_uint32("laya.attention.head_count", H)
    w.add_float32("laya.attention.layer_norm_epsilon", 1e-5)
    w.add_key_value("laya.feed_forward_length", ffn, VT.ARRAY, sub_type=VT.UINT32)
    w.add_string("laya.activation", "relu")
    w.add_string("laya.position_scheme", "learned_absolute")
    w.add_uint32("laya.embedding.rows", R)
    w.add_string("laya.embedding.mapping", "table")
    w.add_key_value("laya.embedding.codepoints", cps, VT.ARRAY, sub_type=VT.UINT32)
    w.add_uint32("laya.replace_classes", C)
    w.add_key_value("laya.lexicon.words", words, VT.ARRAY, sub_type=VT.STRING)
    w.add_key_value("laya.lexicon.frequencies", freqs, VT.ARRAY, sub_type=VT.UINT32)
    w.add_key_value("laya.normalization", ["fullwidth_ascii"], VT.ARRAY, sub_type=VT.STRING)
    w.add_string("laya.provenance.language", "zh")
    w.add_string("laya.provenance.training_data", "numpy random, scripts/gguf_interop.py")
    w.add_string("laya.provenance.created", "2025-01-01")
    w.add_string("tokenizer.ignored", "keys outside laya.* are ignored")
    w.add_uint64("laya.checksum", 0)

    tensors = []

    def add(name, ty, ne, kind="matrix"):
        shape = tuple(reversed(ne))  # numpy (rows, cols) is ne = [cols, rows]
        if kind == "norm":
            src = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            src = (rng.standard_normal(shape) * (0.05 if kind == "bias" else 0.3)).astype(np.float32)
        if ty == Q.F32:
            w.add_tensor(name, src)
            stored = src
        elif ty == Q.F16:
            stored = src.astype(np.float16)
            w.add_tensor(name, stored)
        else:
            stored = gguf.quants.quantize(src, ty)
            w.add_tensor(name, stored, raw_shape=stored.shape, raw_dtype=ty)
        i = len(tensors)
        raw = np.ascontiguousarray(stored).tobytes()
        with open(os.path.join(outdir, f"w{i}.raw"), "wb") as f:
            f.write(raw)
        with open(os.path.join(outdir, f"w{i}.src"), "wb") as f:
            f.write(src.astype("<f4").tobytes())
        deq = gguf.quants.dequantize(np.frombuffer(raw, dtype=np.uint8), ty)
        with open(os.path.join(outdir, f"w{i}.f32"), "wb") as f:
            f.write(np.asarray(deq, dtype="<f4").tobytes())
        tensors.append({"name": name, "type": int(ty), "ne": ne})

    matrix_types = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.F16, Q.BF16, Q.F32]
    add("token_embd.weight", Q.Q8_0, [d, R])
    add("pos_embd.weight", Q.BF16, [d, T])
    for l, f in enumerate(ffn):
        add(f"blk.{l}.attn_norm.weight", Q.F32, [d], "norm")
        add(f"blk.{l}.attn_norm.bias", Q.F32, [d], "bias")
        for j, m in enumerate(["attn_q", "attn_k", "attn_v", "attn_output"]):
            add(f"blk.{l}.{m}.weight", matrix_types[(l + j) % len(matrix_types)], [d, d])
            add(f"blk.{l}.{m}.bias", Q.F32, [d], "bias")
        add(f"blk.{l}.ffn_norm.weight", Q.F32, [d], "norm")
        add(f"blk.{l}.ffn_norm.bias", Q.F32, [d], "bias")
        add(f"blk.{l}.ffn_up.weight", Q.Q4_1 if l == 0 else Q.Q4_0, [d, f])
        add(f"blk.{l}.ffn_up.bias", Q.F32, [f], "bias")
        add(f"blk.{l}.ffn_down.weight", Q.Q8_0 if l == 0 else Q.BF16, [f, d])
        add(f"blk.{l}.ffn_down.bias", Q.F32, [d], "bias")
    add("output_norm.weight", Q.F32, [d], "norm")
    add("output_norm.bias", Q.F32, [d], "bias")
    add("output.weight", Q.F16, [d, V])
    add("output.bias", Q.F32, [V], "bias")
    add("replace.weight", Q.F32, [d, C])
    add("replace.bias", Q.F32, [C], "bias")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    checksum = patch_checksum(path)

    expected = {
        "checksum": checksum,
        "name": "laya-python-interop",
        "context_length": T, "embedding_length": d, "block_count": len(ffn), "head_count": H,
        "layer_norm_epsilon": float(np.float32(1e-5)), "feed_forward_length": ffn,
        "activation": "relu", "position_scheme": "learned_absolute",
        "embedding_rows": R, "codepoints": cps, "replace_classes": C,
        "words": words, "frequencies": freqs, "normalization": ["fullwidth_ascii"],
        "language": "zh", "training_data": "numpy random, scripts/gguf_interop.py",
        "created": "2025-01-01",
        "tensors": tensors,
    }
    with open(os.path.join(outdir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)


def main(argv):
    if len(argv) == 4 and argv[1] == "read":
        dump_reader(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "write":
        write_model(argv[2])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
