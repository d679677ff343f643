#!/usr/bin/python3
"""Turns bench/run.sh's results into docs/benchmark-results.md and two plots.

usage: report.py RESULTS_DIR DOCS_DIR

RESULTS_DIR holds one folder per pass of the whole suite (pass1, pass2, ...;
or the files themselves for a single pass). Every figure reported is the
median over the passes; ratios are taken between medians.
"""
import json
import os
import platform
import struct
import subprocess
import sys
import time

def measured_llama(res):
    """llama.cpp's figures measured in this run by bench/isa_peers.sh, at the
    best ISA of this CPU (medians over its passes); None where not measured.
    No peer figure comes from another run."""
    empty = {q: {"b1": None, "s8": None, "s32": None, "prefill512": None} for q in ("F32", "F16", "Q8_0")}
    try:
        import isa_report
        data, _ = isa_report.load(os.path.join(res, "isa"))
    except (ImportError, OSError, ValueError):
        return empty
    d = next((data[i] for i in isa_report.ISAS if i in data), None)
    if d is None:
        return empty
    return {
        "F32": {"b1": d.get("llama_f32_tg128"), "s8": d.get("llama_f32_s8"),
                "s32": d.get("llama_f32_s32"), "prefill512": d.get("llama_f32_pp512")},
        "F16": {"b1": d.get("llama_f16_tg128"), "s8": None, "s32": None,
                "prefill512": d.get("llama_f16_pp512")},
        "Q8_0": {"b1": d.get("llama_q8_0_tg128"), "s8": None, "s32": None,
                 "prefill512": d.get("llama_q8_0_pp512")},
    }


def load_engine(path):
    runs = json.load(open(path))
    out = {}
    for b in runs["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        out[b["name"]] = b
    return out


def find(engine, prefix, **args):
    """The first benchmark whose name starts with prefix and carries name:value args."""
    for name, b in engine.items():
        if not name.startswith(prefix + "/") and name != prefix:
            continue
        if all(f"{k}:{v}/" in name + "/" for k, v in args.items()):
            return b
    return None


def rate(b):
    return b["items_per_second"] if b else float("nan")


def model_params(model_dir):
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    total = 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for s in meta["shape"]:
            count *= s
        total += count
    return total


def median(values):
    xs = sorted(v for v in values if v == v)
    if not xs:
        return float("nan")
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def pool(values):
    """Median of numbers; dicts and lists pooled member by member (the first pass's
    keys and order); anything else (names, labels) taken from the first pass."""
    first = values[0]
    if isinstance(first, bool) or not isinstance(first, (int, float, dict, list)):
        return first
    if isinstance(first, dict):
        return {k: pool([v[k] for v in values if isinstance(v, dict) and k in v]) for k in first}
    if isinstance(first, list):
        return [pool([v[i] for v in values if isinstance(v, list) and i < len(v)])
                for i in range(len(first))]
    return median([v for v in values if isinstance(v, (int, float))])


def load_pass(folder):
    return {
        "engine": load_engine(os.path.join(folder, "engine.json")),
        "pt32": json.load(open(os.path.join(folder, "pytorch_float32.json"))),
        "pt16": json.load(open(os.path.join(folder, "pytorch_bfloat16.json"))),
        "e2e": [json.loads(line) for line in open(os.path.join(folder, "e2e.jsonl")) if line.strip()],
    }


def pass_folders(res):
    folders = sorted((f for f in os.listdir(res) if f.startswith("pass") and f[4:].isdigit()),
                     key=lambda f: int(f[4:]))
    return [os.path.join(res, f) for f in folders] or [res]


def main():
    res, docs = sys.argv[1], sys.argv[2]
    passes = [load_pass(f) for f in pass_folders(res)]
    LLAMA_CPP = measured_llama(res)
    pooled = pool(passes)
    engine, pt32, pt16, e2e = pooled["engine"], pooled["pt32"], pooled["pt16"], pooled["e2e"]
    model_dir = os.path.join(os.path.dirname(res), "gpt2-small")
    params = model_params(model_dir)
    # Position embeddings are read one row per token, not whole: leave them out.
    streamed = params - 1024 * 768

    triad = find(engine, "BM_MemoryTriad")["bytes_per_second"]
    gemm = find(engine, "BM_Gemm")["items_per_second"]
    bw_limit_fp32 = triad / (streamed * 4)
    bw_limit_bf16 = triad / (streamed * 2)
    # int8: one byte per weight plus a float32 scale per 32.
    bw_limit_int8 = triad / (streamed * (1 + 4 / 32))
    compute_limit = gemm / (2 * params)

    d = {}
    for dt, code in (("fp32", 0), ("bf16", 1), ("int8", 3)):
        d[dt] = {
            "b1": rate(find(engine, "BM_DecodeStep", dtype=code, batch=1, context=128)),
            "b8": rate(find(engine, "BM_DecodeStep", dtype=code, batch=8, context=128)),
            "b32": rate(find(engine, "BM_DecodeStep", dtype=code, batch=32, context=128)),
            "b1_1023": rate(find(engine, "BM_DecodeStep", dtype=code, batch=1, context=1023)),
            "b32_1023": rate(find(engine, "BM_DecodeStep", dtype=code, batch=32, context=1023)),
            "prefill": rate(find(engine, "BM_Prefill", dtype=code, tokens=512)),
        }
    e2e32 = next((e for e in e2e if e["concurrency"] == 32), None)

    def ratio(a, b):
        return f"{a / b:.2f}x" if b and b == b and a == a else "n/a"

    lines = []
    w = lines.append
    w("# Benchmark results")
    w("")
    w(f"Generated by `make bench` (bench/run.sh, bench/report.py) on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")
    cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True).stdout.strip()
    w(f"Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}; "
      f"{pt32['threads']} compute threads; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'auto')}.")
    w(f"Model: GPT-2-small shape (12 layers, d_model 768, 12 heads, FFN 3072, vocab 50257), "
      f"random weights, {params / 1e6:.1f} M parameters. Figures are tokens/s, each the median of "
      f"{len(passes)} pass{'es' if len(passes) > 1 else ''} of the whole suite run one after another "
      f"(ratios between medians; spread per pass below).")
    w("")
    if len(passes) > 1:
        def per_pass(get):
            vals = []
            for p in passes:
                try:
                    vals.append(get(p))
                except (TypeError, KeyError, StopIteration):
                    vals.append(float("nan"))
            return vals

        def e2e_grpc(p, c):
            return next(e for e in p["e2e"] if e["concurrency"] == c)["grpc_tokens_per_s"]

        spread = [
            ("memory triad (GB/s)", per_pass(lambda p: find(p["engine"], "BM_MemoryTriad")["bytes_per_second"] / 1e9)),
            ("fp32 GEMM (GFLOP/s)", per_pass(lambda p: find(p["engine"], "BM_Gemm")["items_per_second"] / 1e9)),
            ("fp32 batch-1 decode", per_pass(lambda p: rate(find(p["engine"], "BM_DecodeStep", dtype=0, batch=1, context=128)))),
            ("bf16 batch-1 decode", per_pass(lambda p: rate(find(p["engine"], "BM_DecodeStep", dtype=1, batch=1, context=128)))),
            ("int8 batch-1 decode", per_pass(lambda p: rate(find(p["engine"], "BM_DecodeStep", dtype=3, batch=1, context=128)))),
            ("PyTorch fp32 batch-1 decode", per_pass(lambda p: p["pt32"]["decode_b1_ctx128_tokens_per_s"])),
            ("fp32 prefill 512", per_pass(lambda p: rate(find(p["engine"], "BM_Prefill", dtype=0, tokens=512)))),
            ("PyTorch fp32 prefill 512", per_pass(lambda p: p["pt32"]["prefill_512_tokens_per_s"])),
            ("32 streams through gRPC", per_pass(lambda p: e2e_grpc(p, 32))),
        ]
        w("Per pass (how much one run moves on these shared machines):")
        w("")
        w("| measure | " + " | ".join(f"pass {i + 1}" for i in range(len(passes))) + " | median |")
        w("|---|" + "---|" * (len(passes) + 1))
        for name, vals in spread:
            w(f"| {name} | " + " | ".join(f"{v:.1f}" for v in vals) + f" | {median(vals):.1f} |")
        w("")
    w("## Machine limits (same run)")
    w("")
    w("| measure | value | implied tokens/s |")
    w("|---|---|---|")
    w(f"| memory triad | {triad / 1e9:.1f} GB/s | fp32 batch-1 decode ≤ {bw_limit_fp32:.1f}; bf16 ≤ {bw_limit_bf16:.1f}; int8 ≤ {bw_limit_int8:.1f} |")
    w(f"| fp32 GEMM 2048³ | {gemm / 1e9:.0f} GFLOP/s | ≤ {compute_limit:.0f} (large batches, prefill) |")
    w("")
    w("## dikkat against PyTorch eager and llama.cpp")
    w("")
    w("| workload | dikkat | PyTorch eager | ratio | llama.cpp (F32) | ratio |")
    w("|---|---|---|---|---|---|")
    rows = [
        ("batch-1 decode, ctx 128, fp32", d["fp32"]["b1"], pt32.get("decode_b1_ctx128_tokens_per_s"), LLAMA_CPP["F32"]["b1"]),
        ("8 streams decode, ctx 128, fp32", d["fp32"]["b8"], pt32.get("decode_b8_ctx128_tokens_per_s"), LLAMA_CPP["F32"]["s8"]),
        ("32 streams decode, ctx 128, fp32", d["fp32"]["b32"], pt32.get("decode_b32_ctx128_tokens_per_s"), LLAMA_CPP["F32"]["s32"]),
        ("batch-1 decode, ctx 1023, fp32", d["fp32"]["b1_1023"], pt32.get("decode_b1_ctx1023_tokens_per_s"), None),
        ("32 streams decode, ctx 1023, fp32", d["fp32"]["b32_1023"], pt32.get("decode_b32_ctx1023_tokens_per_s"), None),
        ("prefill 512, fp32", d["fp32"]["prefill"], pt32.get("prefill_512_tokens_per_s"), LLAMA_CPP["F32"]["prefill512"]),
        ("batch-1 decode, ctx 128, bf16", d["bf16"]["b1"], pt16.get("decode_b1_ctx128_tokens_per_s"), LLAMA_CPP["F16"]["b1"]),
        ("prefill 512, bf16", d["bf16"]["prefill"], pt16.get("prefill_512_tokens_per_s"), LLAMA_CPP["F16"]["prefill512"]),
        ("batch-1 decode, ctx 128, int8", d["int8"]["b1"], None, LLAMA_CPP["Q8_0"]["b1"]),
        ("8 streams decode, ctx 128, int8", d["int8"]["b8"], None, LLAMA_CPP["Q8_0"]["s8"]),
        ("32 streams decode, ctx 128, int8", d["int8"]["b32"], None, LLAMA_CPP["Q8_0"]["s32"]),
        ("prefill 512, int8", d["int8"]["prefill"], None, LLAMA_CPP["Q8_0"]["prefill512"]),
    ]
    for name, ours, pt, ll in rows:
        pt_s = f"{pt:.1f}" if pt else "n/a"
        ll_s = f"{ll:.1f}" if ll else "—"
        w(f"| {name} | {ours:.1f} | {pt_s} | {ratio(ours, pt)} | {ll_s} | {ratio(ours, ll) if ll else '—'} |")
    w("")
    w("llama.cpp figures were measured in this run on this machine (bench/isa_peers.sh; llama.cpp is not")
    w("part of this project; — where not measured); the bf16 rows compare with llama.cpp's F16, the int8 rows (`--dtype int8`, weight-only,")
    w("a float32 scale per 32 inputs) with its Q8_0. PyTorch eager has no int8 baseline here.")
    w("")
    w(f"- fp32 batch-1 decode at {d['fp32']['b1']:.1f} tokens/s is {100 * d['fp32']['b1'] / bw_limit_fp32:.0f}% of the memory-bandwidth limit measured in this run.")
    w(f"- bf16 batch-1 decode is {ratio(d['bf16']['b1'], d['fp32']['b1'])} our fp32.")
    w("")
    w("### int8 weights side by side (same run)")
    w("")
    w("| workload | fp32 | bf16 | int8 | int8 / fp32 | int8 / bf16 | llama.cpp Q8_0 | int8 / Q8_0 |")
    w("|---|---|---|---|---|---|---|---|")
    for name, key, ll in (("batch-1 decode, ctx 128", "b1", "b1"), ("8 streams, ctx 128", "b8", "s8"),
                          ("32 streams, ctx 128", "b32", "s32"), ("prefill 512", "prefill", "prefill512")):
        a, b, c = d["fp32"][key], d["bf16"][key], d["int8"][key]
        q = LLAMA_CPP["Q8_0"][ll]
        q_s = f"{q:.1f}" if q else "—"
        w(f"| {name} | {a:.1f} | {b:.1f} | {c:.1f} | {ratio(c, a)} | {ratio(c, b)} | {q_s} | {ratio(c, q)} |")
    w("")
    w(f"- int8 batch-1 decode at {d['int8']['b1']:.1f} tokens/s is {100 * d['int8']['b1'] / bw_limit_int8:.0f}% of its memory-bandwidth limit in this run.")
    w("")
    w("## gRPC end to end against the engine in process")
    w("")
    w("Greedy, 16-token prompts, 32 new tokens, 4 x concurrency requests; the same workload submitted to")
    w("`server::Engine` directly and through `dikkat-server` with `dikkat bench` (loopback).")
    w("")
    w("| concurrency | in-process tokens/s | gRPC tokens/s | gRPC / in-process |")
    w("|---|---|---|---|")
    for e in e2e:
        ip = e["inprocess"]["tokens_per_s"]
        w(f"| {e['concurrency']} | {ip:.1f} | {e['grpc_tokens_per_s']:.1f} | {100 * e['grpc_tokens_per_s'] / ip:.0f}% |")
    w("")
    if e2e32:
        w(f"32 concurrent streams through the server: {e2e32['grpc_tokens_per_s']:.1f} tokens/s "
          f"({ratio(e2e32['grpc_tokens_per_s'], LLAMA_CPP['F32']['s32'])} llama.cpp F32, "
          f"{ratio(e2e32['grpc_tokens_per_s'], pt32.get('decode_b32_ctx128_tokens_per_s'))} PyTorch eager's static batch).")
        w("")

    # Plots.
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        ctx = []
        for name, b in engine.items():
            if name.startswith("BM_DecodeContextCurve/"):
                c = int(name.split("context:")[1].split("/")[0])
                ctx.append((c, b["real_time"]))
        ctx.sort()
        if ctx:
            plt.figure(figsize=(6, 4))
            plt.plot([c for c, _ in ctx], [t for _, t in ctx], "o-")
            plt.xlabel("context (tokens)")
            plt.ylabel("decode step time (ms)")
            plt.title("batch-1 decode step vs context, fp32")
            plt.grid(True, alpha=0.3)
            plt.ylim(bottom=0)
            plt.tight_layout()
            plt.savefig(os.path.join(docs, "bench-step-vs-context.png"), dpi=100)
            w("![decode step time against context](bench-step-vs-context.png)")
            w("")
        if e2e:
            plt.figure(figsize=(6, 4))
            cs = [e["concurrency"] for e in e2e]
            plt.plot(cs, [e["inprocess"]["tokens_per_s"] for e in e2e], "o-", label="engine in process")
            plt.plot(cs, [e["grpc_tokens_per_s"] for e in e2e], "s-", label="through gRPC")
            plt.xscale("log", base=2)
            plt.xlabel("concurrent streams")
            plt.ylabel("tokens/s")
            plt.title("throughput against concurrency, fp32")
            plt.grid(True, alpha=0.3)
            plt.legend()
            plt.tight_layout()
            plt.savefig(os.path.join(docs, "bench-throughput-vs-concurrency.png"), dpi=100)
            w("![throughput against concurrency](bench-throughput-vs-concurrency.png)")
            w("")
    except ImportError:
        w("(python3-matplotlib is not installed: no plots)")
    try:
        import isa_report
        isa_section = isa_report.section(os.path.join(res, "isa"), model_dir)
    except (ImportError, OSError, ValueError) as e:
        isa_section = f"(per-ISA section not written: {e})"
    if isa_section:
        lines.append(isa_section)
    open(os.path.join(docs, "benchmark-results.md"), "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
