#!/usr/bin/python3
"""Cross-language client of a running dikkat server, for python_client_test.

Generates the Python stubs from proto/dikkat/v1/dikkat.proto with protoc and
Debian's grpc_python_plugin (python3-grpc-tools in bookworm is too old to rely
on), then calls the server the way a Python service would: Generate
(streaming), Encode (float32 and bfloat16), an invalid request, and
GetModelInfo through server reflection alone, with no generated code (the
reflection messages are encoded by hand: grpcio's reflection client is not
packaged in Debian). Prints one JSON object on stdout for the C++ test to
compare with what the C++ client gets.

usage: python_client.py --target HOST:PORT --proto-root DIR --out DIR
"""
import argparse
import json
import shutil
import struct
import subprocess
import sys


def generate_stubs(proto_root, out):
    subprocess.run(
        [shutil.which("protoc") or "/usr/bin/protoc", f"-I{proto_root}", f"--python_out={out}", f"--grpc_out={out}",
         "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin", "dikkat/v1/dikkat.proto"],
        check=True)
    sys.path.insert(0, out)


def stream_generate(stub, pb, model, text, max_new_tokens):
    request = pb.GenerateRequest(model=model, input=pb.Input(text=text),
                                 sampling=pb.SamplingOptions(temperature=0.0),
                                 max_new_tokens=max_new_tokens, ignore_eos=True)
    ids, text_out, chunks, last = [], "", 0, None
    for response in stub.Generate(request, timeout=30):
        chunks += 1
        ids.extend(t.id for t in response.tokens)
        text_out += response.text
        last = response
    return {"ids": ids, "text": text_out, "chunks": chunks,
            "finish_reason": pb.FinishReason.Name(last.finish_reason),
            "generated_tokens": last.stats.generated_tokens}


def bf16_to_floats(data):
    values = []
    for (bits,) in struct.iter_unpack("<H", data):
        values.append(struct.unpack("<f", struct.pack("<I", bits << 16))[0])
    return values


def encode(stub, pb, text):
    out = {}
    for name, dtype in [("f32", pb.DTYPE_FLOAT32), ("bf16", pb.DTYPE_BFLOAT16)]:
        response = stub.Encode(pb.EncodeRequest(inputs=[pb.Input(text=text)], normalize=True,
                                                output_dtype=dtype), timeout=30)
        result = response.results[0]
        out["model"] = response.model
        out["token_ids"] = list(result.token_ids)
        out[name + "_shape"] = list(result.embedding.shape)
        if dtype == pb.DTYPE_FLOAT32:
            out["f32_hex"] = result.embedding.data.hex()
            out["f32_values"] = [v for (v,) in struct.iter_unpack("<f", result.embedding.data)]
        else:
            out["bf16_values"] = bf16_to_floats(result.embedding.data)
    return out


def invalid_request(stub, pb, grpc):
    request = pb.GenerateRequest(input=pb.Input(text="x"),
                                 sampling=pb.SamplingOptions(temperature=-1.0))
    try:
        for _ in stub.Generate(request, timeout=30):
            pass
    except grpc.RpcError as e:
        return {"code": e.code().name, "details": e.details()}
    return {"code": "OK", "details": ""}


# ---- server reflection by hand (grpc.reflection.v1alpha) ----------------------------

def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(buf):
    """Yields (field number, wire type, value) of a serialized message."""
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(buf, i)
        elif wire == 2:
            length, i = _read_varint(buf, i)
            value, i = buf[i:i + length], i + length
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _read_varint(buf, i):
    shift = result = 0
    while True:
        byte = buf[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, i


def _len_field(number, payload):
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def reflection(channel):
    # ServerReflectionRequest: list_services = 7, file_containing_symbol = 4.
    # ServerReflectionResponse: file_descriptor_response = 4 (its
    # file_descriptor_proto = 1), list_services_response = 6 (service = 1,
    # each with name = 1), error_response = 7.
    call = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                 request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)
    requests = [_len_field(7, b"*"), _len_field(4, b"dikkat.v1.Dikkat")]
    responses = list(call(iter(requests), timeout=30))
    services, files = [], []
    for response in responses:
        for number, _, value in _fields(response):
            if number == 6:
                for n, _, service in _fields(value):
                    if n == 1:
                        services += [v.decode() for k, _, v in _fields(service) if k == 1]
            elif number == 4:
                files += [v for k, _, v in _fields(value) if k == 1]
            elif number == 7:
                raise RuntimeError(f"reflection error: {value!r}")
    return services, files


def model_info_by_reflection(channel):
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    services, files = reflection(channel)
    pool = descriptor_pool.DescriptorPool()
    pending = [descriptor_pb2.FileDescriptorProto.FromString(f) for f in files]
    while pending:  # dependencies first, whatever order the server sent
        left = []
        for proto in pending:
            try:
                pool.Add(proto)
            except Exception:  # a dependency is not in the pool yet
                left.append(proto)
        if len(left) == len(pending):
            raise RuntimeError("cannot resolve the reflected files: "
                               + ", ".join(p.name for p in left))
        pending = left
    factory = message_factory.MessageFactory(pool)
    request_class = factory.GetPrototype(pool.FindMessageTypeByName("dikkat.v1.GetModelInfoRequest"))
    response_class = factory.GetPrototype(pool.FindMessageTypeByName("dikkat.v1.GetModelInfoResponse"))
    method = pool.FindServiceByName("dikkat.v1.Dikkat").FindMethodByName("GetModelInfo")
    call = channel.unary_unary("/dikkat.v1.Dikkat/GetModelInfo",
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=response_class.FromString)
    response = call(request_class(), timeout=30)
    return {"services": sorted(services), "files": [p.name for p in map(
                descriptor_pb2.FileDescriptorProto.FromString, files)],
            "method_input": method.input_type.full_name,
            "models": [m.name for m in response.models],
            "default": [m.name for m in response.models if m.is_default]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--proto-root", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    generate_stubs(args.proto_root, args.out)
    import grpc
    from dikkat.v1 import dikkat_pb2 as pb
    from dikkat.v1 import dikkat_pb2_grpc as pb_grpc

    with grpc.insecure_channel(args.target) as channel:
        stub = pb_grpc.DikkatStub(channel)
        result = {
            "grpc_version": grpc.__version__,
            "generate": stream_generate(stub, pb, "", "Hello from Python", 10),
            "generate_s2s": stream_generate(stub, pb, "s2s", "translate me", 6),
            "encode": encode(stub, pb, "embed me"),
            "invalid": invalid_request(stub, pb, grpc),
            "reflection": model_info_by_reflection(channel),
        }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
