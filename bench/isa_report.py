#!/usr/bin/python3
"""The per-ISA section of docs/benchmark-results.md, from bench/isa_peers.sh.

usage: isa_report.py RESULTS_DIR MODEL_DIR  (prints Markdown)

RESULTS_DIR holds pass<N>/<isa>/ folders. Every figure is the median over the
passes; every ratio is taken between medians of the same run on this machine.
"""
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import find, load_engine, median, model_params, rate  # noqa: E402

ISAS = ("avx512", "avx2", "generic")
# Batch 1 paired with llama.cpp round by round: (key, dikkat dtype, GGUF type).
PAIRED = (("fp32", "float32", "f32"), ("bf16", "bfloat16", "f16"), ("int8", "int8", "q8_0"))
PAIRED_TARGETS = {"fp32": 1.1, "bf16": 1.3, "int8": 1.2}


def grpc_bench(path):
    """`dikkat bench` output -> tokens/s, TTFT p50 (ms), inter-token p50 (ms)."""
    if not os.path.exists(path):
        return {}
    text = open(path).read()
    out = {}
    m = re.search(r"throughput: ([0-9.]+) generated tokens/s", text)
    if m:
        out["tokens_per_s"] = float(m.group(1))
    m = re.search(r"time to first token\s+([0-9.]+)", text)
    if m:
        out["ttft_ms"] = float(m.group(1))
    m = re.search(r"inter-token\s+([0-9.]+)", text)
    if m:
        out["itl_ms"] = float(m.group(1))
    return out


def llama_bench(path):
    """llama-bench -o json -> {"pp512": t/s, "tg128": t/s}."""
    out = {}
    try:
        for r in json.load(open(path)):
            if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
                out[f"pp{r['n_prompt']}"] = r["avg_ts"]
            elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
                out[f"tg{r['n_gen']}"] = r["avg_ts"]
    except (OSError, ValueError):
        pass
    return out


def llama_batched(path):
    """llama-batched-bench's table -> {parallel sequences: (S_TG t/s, wall t/s)}.

    S_TG is generation alone (its prompt processing not timed); wall is the
    generated tokens over the whole run, prompts included (B x TG / T), the
    same accounting as `dikkat bench` through gRPC.
    """
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 10 and cells[0].isdigit() and cells[2].isdigit():
            try:
                tg, b, total = int(cells[1]), int(cells[2]), float(cells[8])
                out[b] = (float(cells[7]), b * tg / total if total > 0 else float("nan"))
            except ValueError:
                pass
    return out


def load_round(folder):
    r = {}
    engine_path = os.path.join(folder, "engine.json")
    if os.path.exists(engine_path):
        e = load_engine(engine_path)
        try:
            r["triad"] = find(e, "BM_MemoryTriad")["bytes_per_second"]
        except StopIteration:
            pass
        for dt, code in (("fp32", 0), ("bf16", 1), ("int8", 3)):
            try:
                r[f"prefill_{dt}"] = rate(find(e, "BM_Prefill", dtype=code, tokens=512))
            except StopIteration:
                pass
        # The machine's state in this pass (performance.md, "Session 45"): a
        # batch-1 step is bound by the memory, a 16-token prefill by the FMAs.
        p16 = find(e, "BM_Prefill", dtype=0, tokens=16)
        s1 = find(e, "BM_DecodeStep", dtype=0, batch=1, context=128)
        if p16 and p16.get("items_per_second"):
            r["inproc_prefill16_ms"] = 16e3 / p16["items_per_second"]
        if s1 and s1.get("items_per_second"):
            r["inproc_step1_ms"] = 1e3 / s1["items_per_second"]
    for dt, name in (("fp32", "float32"), ("bf16", "bfloat16"), ("int8", "int8"),
                     ("fp32kv16", "float32_kv16")):
        for c in (1, 8, 32):
            g = grpc_bench(os.path.join(folder, f"dikkat_{name}_c{c}.txt"))
            for k, v in g.items():
                r[f"{dt}_c{c}_{k}"] = v
    for q in ("f32", "f16", "q8_0"):
        for k, v in llama_bench(os.path.join(folder, f"llama_{q}.json")).items():
            r[f"llama_{q}_{k}"] = v
    for n, (gen, wall) in llama_batched(os.path.join(folder, "llama_batched_f32.txt")).items():
        r[f"llama_f32_s{n}"] = gen
        r[f"llama_f32_w{n}"] = wall
    # dikkat's generation alone at c streams: c tokens per inter-token time.
    for dt in ("fp32", "fp32kv16"):
        for c in (8, 32):
            itl = r.get(f"{dt}_c{c}_itl_ms")
            if itl:
                r[f"{dt}_c{c}_gen_tokens_per_s"] = c * 1000.0 / itl
    # Batch 1 round by round (isa_peers.sh, dikkat_paired): each round's
    # ratio, and their median for this pass.
    for dt, name, q in PAIRED:
        ratios = []
        for path in sorted(glob.glob(os.path.join(folder, f"paired_dikkat_{name}_r*.txt"))):
            k = path.rsplit("_r", 1)[1][:-len(".txt")]
            ours = grpc_bench(path).get("tokens_per_s")
            theirs = llama_bench(os.path.join(folder, f"paired_llama_{q}_r{k}.json")).get("tg128")
            if ours and theirs:
                ratios.append(ours / theirs)
        if ratios:
            r[f"paired_{dt}_rounds"] = ratios
            r[f"paired_{dt}"] = median(ratios)
    pt = os.path.join(folder, "pytorch_float32.json")
    try:
        p = json.load(open(pt))
    except (OSError, ValueError):  # not run, or cut short
        p = None
    if p:
        for k in ("decode_b1_ctx128", "decode_b8_ctx128", "decode_b32_ctx128", "prefill_512"):
            if f"{k}_tokens_per_s" in p:
                r[f"pt_{k}"] = p[f"{k}_tokens_per_s"]
    cpu = os.path.join(folder, "llama_cpu.txt")
    if os.path.exists(cpu):
        r["llama_variant"] = " ".join(open(cpu).read().split())
    return r


def load(res):
    """{isa: {key: median over passes}} and the number of passes."""
    passes = sorted(glob.glob(os.path.join(res, "pass*")))
    rounds = {isa: [] for isa in ISAS}
    for p in passes:
        for isa in ISAS:
            if os.path.isdir(os.path.join(p, isa)):
                rounds[isa].append(load_round(os.path.join(p, isa)))
    out = {}
    for isa, rs in rounds.items():
        if not rs:
            continue
        keys = set().union(*rs)
        out[isa] = {}
        for k in keys:
            vals = [r[k] for r in rs if k in r]
            if isinstance(vals[0], list):  # per-round ratios: all rounds of all passes
                out[isa][k] = [v for vs in vals for v in vs]
            else:
                out[isa][k] = vals[0] if isinstance(vals[0], str) else median(vals)
        for dt, _, _ in PAIRED:  # the median of every round, not of the passes' medians
            if f"paired_{dt}_rounds" in out[isa]:
                out[isa][f"paired_{dt}"] = median(out[isa][f"paired_{dt}_rounds"])
    return out, len(passes)


def load_passes(res):
    """[{isa: {key: value}} for each pass], in pass order."""
    out = []
    for p in sorted(glob.glob(os.path.join(res, "pass*"))):
        out.append({isa: load_round(os.path.join(p, isa)) for isa in ISAS
                    if os.path.isdir(os.path.join(p, isa))})
    return out


# The targets: (workload row's name, dikkat key, llama.cpp key, PyTorch key,
# target against llama.cpp, target against PyTorch).
ROWS = [
    ("batch-1 decode fp32 (llama.cpp F32)", "fp32_c1_tokens_per_s", "llama_f32_tg128", "pt_decode_b1_ctx128", 1.1, None),
    ("batch-1 decode bf16 (llama.cpp F16)", "bf16_c1_tokens_per_s", "llama_f16_tg128", None, 1.3, None),
    ("batch-1 decode int8 (llama.cpp Q8_0)", "int8_c1_tokens_per_s", "llama_q8_0_tg128", None, 1.2, None),
    ("8 streams fp32, wall clock (llama.cpp F32, 8 sequences)", "fp32_c8_tokens_per_s", "llama_f32_w8", "pt_decode_b8_ctx128", 2.0, 2.0),
    ("32 streams fp32, wall clock (llama.cpp F32, 32 sequences)", "fp32_c32_tokens_per_s", "llama_f32_w32", "pt_decode_b32_ctx128", 2.0, 2.0),
    ("8 streams fp32, generation alone (llama.cpp S_TG)", "fp32_c8_gen_tokens_per_s", "llama_f32_s8", None, None, None),
    ("32 streams fp32, generation alone (llama.cpp S_TG)", "fp32_c32_gen_tokens_per_s", "llama_f32_s32", None, None, None),
    ("8 streams fp32 + fp16 KV cache, wall clock", "fp32kv16_c8_tokens_per_s", "llama_f32_w8", None, None, None),
    ("32 streams fp32 + fp16 KV cache, wall clock", "fp32kv16_c32_tokens_per_s", "llama_f32_w32", None, None, None),
    ("prefill 512 fp32 (llama.cpp F32 pp512)", "prefill_fp32", "llama_f32_pp512", "pt_prefill_512", 1.2, 1.2),
    ("prefill 512 bf16 (llama.cpp F16 pp512)", "prefill_bf16", "llama_f16_pp512", None, None, None),
    ("prefill 512 int8 (llama.cpp Q8_0 pp512)", "prefill_int8", "llama_q8_0_pp512", None, None, None),
]


def targets_of(isa, d, streamed):
    """[(target, measured, met)] of one ISA's figures (medians or one pass)."""
    out = []
    for name, ours, ll, pt, t_ll, t_pt in ROWS:
        o, l, p = d.get(ours), d.get(ll), d.get(pt) if pt else None
        rl, rp = ratio(o, l), ratio(o, p)
        if t_ll is not None and rl is not None:
            out.append((f"{name}: ≥ {t_ll}x llama.cpp", rl, rl >= t_ll))
        if t_pt is not None and rp is not None:
            out.append((f"{name}: ≥ {t_pt}x PyTorch", rp, rp >= t_pt))
        if isa == "generic" and rp is not None:
            out.append((f"{name}: generic ≥ PyTorch eager", rp, rp >= 1.0))
    triad_limit = d.get("triad", float("nan")) / (streamed * 4)
    b1 = d.get("fp32_c1_tokens_per_s")
    if b1 and triad_limit == triad_limit:
        frac = b1 / triad_limit
        out.append(("batch-1 decode fp32 ≥ 85% of the triad limit", frac, frac >= 0.85))
    ttft, itl = d.get("fp32_c1_ttft_ms"), d.get("fp32_c1_itl_ms")
    if ttft and itl:
        out.append(("time to first token ≤ 1.5x one decode step", ttft / itl, ttft / itl <= 1.5))
    for dt, _, q in PAIRED:
        v = d.get(f"paired_{dt}")
        if v is not None:
            t = PAIRED_TARGETS[dt]
            out.append((f"batch-1 decode {dt}, paired round by round (llama.cpp {q.upper()}): "
                        f"≥ {t}x llama.cpp", v, v >= t))
    return out


def fmt(v, digits=1):
    return f"{v:.{digits}f}" if isinstance(v, (int, float)) and v == v else "—"


def ratio(a, b):
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b or a != a:
        return None
    return a / b


def rs(x):
    return f"{x:.2f}x" if x is not None else "—"


def section(res, model_dir):
    data, npass = load(res)
    if not data:
        return ""
    params = model_params(model_dir)
    streamed = params - 1024 * 768
    cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"],
                         capture_output=True, text=True).stdout.strip()
    flags = open("/proc/cpuinfo").read()
    has = [f for f in ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx2", "fma", "f16c")
           if re.search(rf"\b{f}\b", flags)]
    lines = []
    w = lines.append
    w("## Per ISA, with llama.cpp and PyTorch eager in the same run")
    w("")
    w(f"Machine: {cpu} ({', '.join(has)}), {os.cpu_count()} cores. bench/isa_peers.sh: for each ISA the")
    w("CPU can execute, dikkat-server with `DIKKAT_ISA` and its LibTorch's `ATEN_CPU_CAPABILITY` forced")
    w("(through gRPC with `dikkat bench`, greedy, 16-token prompt; prefill and the triad in process),")
    w("llama.cpp (../shared/tools/llama.cpp, commit c392e509; random-weight GGUFs of the same shape; for")
    w("avx2 only its haswell CPU variant) and PyTorch eager (`ATEN_CPU_CAPABILITY` forced), one after")
    w("another; every process of a round with the same")
    w(f"OpenBLAS kernels. Medians of {npass} pass{'es' if npass != 1 else ''}; tokens/s unless said.")
    w("8 and 32 streams have the shape of llama-batched-bench's run (16-token prompts, 128 new tokens")
    w("each): *wall clock* is generated tokens over the whole run with the prompts' prefill in it on")
    w("both sides (dikkat through gRPC; llama.cpp B x TG / T); *generation alone* is dikkat's streams")
    w("over its median inter-token time against llama.cpp's S_TG (its prompt processing not timed).")
    w("llama.cpp's KV cache is float16 (its default); dikkat's is float32 unless the row says")
    w("fp16 KV cache (`--kv_cache_dtype=float16`). PyTorch eager is a static batch's decode step at")
    w("context 128 (no prefill).")
    w("")
    targets = []
    passes = load_passes(res)
    for isa in ISAS:
        if isa not in data:
            continue
        d = data[isa]
        triad_limit = d.get("triad", float("nan")) / (streamed * 4)
        w(f"### {isa}")
        w("")
        if "llama_variant" in d:
            w(f"llama.cpp CPU backend: {d['llama_variant']}")
            w("")
        w("| workload | dikkat | llama.cpp | dikkat / llama.cpp | PyTorch eager | dikkat / PyTorch |")
        w("|---|---|---|---|---|---|")
        for name, ours, ll, pt, _, _ in ROWS:
            o, l, p = d.get(ours), d.get(ll), d.get(pt) if pt else None
            rl, rp = ratio(o, l), ratio(o, p)
            w(f"| {name} | {fmt(o)} | {fmt(l)} | {rs(rl)} | {fmt(p)} | {rs(rp)} |")
        w("")
        b1 = d.get("fp32_c1_tokens_per_s")
        if b1 and triad_limit == triad_limit:
            frac = b1 / triad_limit
            w(f"- Memory triad {d['triad'] / 1e9:.1f} GB/s: fp32 batch-1 decode ≤ {triad_limit:.1f} tokens/s; "
              f"dikkat at {100 * frac:.0f}% of it.")
        ttft, itl = d.get("fp32_c1_ttft_ms"), d.get("fp32_c1_itl_ms")
        if ttft and itl:
            w(f"- Time to first token of the 16-token prompt {ttft:.1f} ms, one decode step {itl:.1f} ms "
              f"({ttft / itl:.2f}x).")
        p16, s1 = d.get("inproc_prefill16_ms"), d.get("inproc_step1_ms")
        if p16 and s1:
            w(f"- In process, the machine's state in this pass: a batch-1 fp32 decode step {s1:.1f} ms "
              f"(the weights at {streamed * 4 / (s1 / 1e3) / 1e9:.0f} GB/s), the 16-token fp32 prefill "
              f"{p16:.1f} ms ({p16 / s1:.2f}x a step). The step is bound by the memory, the prefill "
              f"by the FMAs: their ratio moves with the memory's speed (performance.md, \"Session 45\").")
        # Paired: each pass's own ratio (the two run back to back), then
        # their median.
        kv = []
        for c in (8, 32):
            a, b = f"fp32kv16_c{c}_tokens_per_s", f"fp32_c{c}_tokens_per_s"
            by_pass = [pd[isa][a] / pd[isa][b] for pd in passes
                       if isa in pd and pd[isa].get(a) and pd[isa].get(b)]
            if by_pass:
                kv.append(f"{c} streams {median(by_pass):.2f}x ("
                          + " / ".join(f"{r:.2f}" for r in by_pass) + ")")
        if kv:
            w("- float16 KV cache / float32 KV cache, wall clock, each pass's ratio of the two run "
              "back to back, median (by pass): " + ", ".join(kv) + ".")
        paired = []
        for dt, _, q in PAIRED:
            rounds = d.get(f"paired_{dt}_rounds")
            if rounds:
                by_pass = [f"{pd[isa][f'paired_{dt}']:.2f}" for pd in passes
                           if isa in pd and f"paired_{dt}" in pd[isa]]
                paired.append(f"{dt} / {q.upper()} {median(rounds):.2f}x (of {len(rounds)} rounds, "
                              f"{min(rounds):.2f}-{max(rounds):.2f}; pass medians "
                              + " / ".join(by_pass) + ")")
        if paired:
            w("- Batch 1 against llama.cpp round by round (llama-bench tg128 and one dikkat stream "
              "back to back, the order alternating; the median of every round's ratio): "
              + ", ".join(paired) + ".")
        w("")
        targets += [(isa,) + t for t in targets_of(isa, d, streamed)]
    per_pass = [{isa: targets_of(isa, pd[isa], streamed) for isa in pd} for pd in passes]
    if targets:
        w("### Targets (issue \"Fast on every CPU\")")
        w("")
        w("Measured: the ratio of the medians (three decimals where two would round across the")
        w("target); by pass: each pass's own ratio. The rows paired round by round give the")
        w("median of every round's ratio, and by pass each pass's median of its rounds.")
        w("")
        w("| ISA | target | measured | by pass | met |")
        w("|---|---|---|---|---|")
        for isa, name, v, ok in targets:
            shown = f"{v:.2f}"
            threshold = re.search(r"(\d+(?:\.\d+)?)(x|%)", name.split(": ")[-1] if ": " in name else name)
            if threshold:
                t = float(threshold.group(1)) / (100 if threshold.group(2) == "%" else 1)
                if (float(shown) >= t) != (v >= t) or (float(shown) <= t) != (v <= t):
                    shown = f"{v:.3f}"
            passes = []
            for pp in per_pass:
                hit = [pv for pn, pv, _ in pp.get(isa, []) if pn == name]
                passes.append(f"{hit[0]:.2f}" if hit else "—")
            w(f"| {isa} | {name} | {shown} | {' / '.join(passes)} | {'yes' if ok else '**no**'} |")
        w("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(section(sys.argv[1], sys.argv[2]))
