#!/usr/bin/python3
"""Writes a Q8_0 copy of a float32 GGUF with llama.cpp's own gguf-py quantizer,
for bench/isa_peers.sh: the llama-quantize of ../shared/tools/llama.cpp
(commit c392e509, CPU backend loaded dynamically) crashes in
ggml_backend_dev_backend_reg before it quantizes anything. Every matrix whose
rows are whole 32-element blocks becomes Q8_0 (as llama-quantize's Q8_0 type
does); vectors (norms, biases) stay float32; metadata is copied, with
general.file_type set to MOSTLY_Q8_0.

usage: PYTHONPATH=<llama.cpp>/gguf-py gguf_q8_0.py IN_F32.gguf OUT_Q8_0.gguf
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType, GGUFValueType


def field_value(field):
    kind = field.types[0]
    if kind == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    if kind == GGUFValueType.ARRAY:
        sub = field.types[1]
        if sub == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        return [field.parts[i][0].item() for i in field.data]
    return field.parts[field.data[0]][0].item()


def main():
    src, dst = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    arch = field_value(reader.fields["general.architecture"])
    writer = gguf.GGUFWriter(dst, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field_value(field)
        if name == "general.file_type":
            value = int(gguf.LlamaFileType.MOSTLY_Q8_0)
        if field.types[0] == GGUFValueType.ARRAY:
            writer.add_key_value(name, value, GGUFValueType.ARRAY)
        else:
            writer.add_key_value(name, value, field.types[0])
    for t in reader.tensors:
        data = np.asarray(t.data, dtype=np.float32)  # numpy (rows, cols) == ggml {cols, rows}
        if data.ndim == 2 and data.shape[-1] % 32 == 0:
            q = gguf.quants.quantize(data, GGMLQuantizationType.Q8_0)
            writer.add_tensor(t.name, q, raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(t.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
