#!/usr/bin/python3
"""Writes the seed corpora of the fuzzers into fuzz/corpus/<target>/.

Seeds are small valid inputs of each format (libFuzzer mutates from them):
safetensors files and torch.save checkpoints written by Debian's PyTorch,
dikkat.json and Hugging Face config.json texts, tokenizer texts, and
serialized dikkat.v1 requests (protoc-generated Python classes). The output
is committed; rerun after changing a format.

usage: /usr/bin/python3 fuzz/make_seed_corpus.py
"""
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def out(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def torch_save(obj, protocol=2):
    buf = io.BytesIO()
    torch.save(obj, buf, pickle_protocol=protocol)
    return buf.getvalue()


def data_pkl(obj, protocol=2):
    """The data.pkl record of a torch.save zip: what the unpickler reads."""
    with zipfile.ZipFile(io.BytesIO(torch_save(obj, protocol))) as z:
        (name,) = [n for n in z.namelist() if n.endswith("/data.pkl")]
        return z.read(name)


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    g = torch.Generator().manual_seed(0)

    # ---- weights ----
    out("safetensors", "one_f32", safetensors({"w": torch.randn(2, 3, generator=g)}))
    out("safetensors", "mixed", safetensors({
        "a": torch.randn(4, generator=g).to(torch.bfloat16),
        "b": torch.arange(3, dtype=torch.int64),
        "c": torch.randn(2, 2, generator=g).to(torch.float16),
        "d": torch.tensor([True, False]),
        "e": torch.zeros(0, 3)}, {"format": "pt"}))
    out("safetensors", "empty_header", struct.pack("<Q", 2) + b"{}")
    out("torch_checkpoint", "state_dict", torch_save({"w": torch.randn(2, 2, generator=g),
                                                      "b": torch.zeros(2)}))
    base = torch.arange(6, dtype=torch.float32)
    out("torch_checkpoint", "nested_views", torch_save(
        {"model": {"x": base, "y": base[2:5], "z": base.view(2, 3).t()}, "step": 3}))
    out("torch_checkpoint", "dtypes", torch_save(
        {"h": torch.ones(3, dtype=torch.float16), "i": torch.arange(4, dtype=torch.int32),
         "bf": torch.ones(2, dtype=torch.bfloat16), 0: torch.ones(1)}))

    # ---- the unpickler alone (torch_pickle): data.pkl of torch.save zips ----
    # Every storage holds 64 bytes, the size of each record the fuzzer serves.
    out("torch_pickle", "state_dict", data_pkl({"w": torch.randn(4, 4, generator=g),
                                                "b": torch.zeros(16)}))
    lin = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 4, bias=False))
    # A module's state_dict: an OrderedDict with _metadata (REDUCE, BUILD).
    out("torch_pickle", "module_state_dict_proto4", data_pkl(lin.state_dict(), protocol=4))
    out("torch_pickle", "parameters", data_pkl(
        {"p": torch.nn.Parameter(torch.randn(16, generator=g)), "i": torch.arange(8)}))
    base = torch.arange(16, dtype=torch.float32)
    out("torch_pickle", "views_and_nesting", data_pkl({
        "model": {"x": base, "row": base[4:8], "t": base.view(4, 4).t(), "e": base[:0]},
        "optimizer": {"state": {0: {"step": 3, "exp_avg": torch.ones(32, dtype=torch.float16)}},
                      "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": [0]}]},
        "step": 7, "name": "run", "flag": True, "ratio": 0.5, "none": None,
        -1: torch.ones(32, dtype=torch.bfloat16), 2**40: torch.ones(64, dtype=torch.bool)}))
    # Hostile pickles from issue 15: a dict that contains itself (SETITEM
    # of memo entry 0 into itself), and dicts / lists nested deep.
    out("torch_pickle", "cyclic_dict", b"\x80\x02}q\x00X\x01\x00\x00\x00ah\x00s.")
    out("torch_pickle", "deep_dicts",
        b"\x80\x02" + b"}X\x01\x00\x00\x00a" * 400 + b"}" + b"s" * 400 + b".")
    out("torch_pickle", "deep_lists", b"\x80\x02}X\x01\x00\x00\x00a" + b"]" * 1500 + b"a" * 1499
        + b"s.")
    # Fixed problems (tests/io/weights_test.cc): a list appended to itself
    # and popped, or passed to REDUCE (the cycle leaked; this fuzzer found
    # it, minimized here); 60 levels of {"a": d, "b": d} through the memo
    # (2^60 paths to flatten; seen in review, a timeout here).
    out("torch_pickle", "crash_leak_popped_cycle", b"\x80\x02]2a0}.")
    out("torch_pickle", "crash_leak_reduced_cycle", b"\x80\x02cbuiltins\nlist\n]2a\x85R0}.")
    shared = b"\x80\x02}q\x000"
    for i in range(1, 61):
        shared += (b"}(X\x01\x00\x00\x00ah" + bytes([i - 1]) + b"X\x01\x00\x00\x00bh"
                   + bytes([i - 1]) + b"uq" + bytes([i]) + (b"0" if i < 60 else b""))
    out("torch_pickle", "crash_timeout_shared_dicts", shared + b".")

    # ---- safetensors index (the fuzzer's sandbox has these shards) ----
    def index(name, weight_map, **extra):
        out("safetensors_index", name, json.dumps(dict(extra, weight_map=weight_map), indent=2))
    index("two_shards", {"a": "model-00001-of-00002.safetensors",
                         "b": "model-00001-of-00002.safetensors",
                         "c": "model-00002-of-00002.safetensors"}, metadata={"total_size": 48})
    index("nested_shard", {"d": "./nested/shard.safetensors", "c": "model-00002-of-00002.safetensors"})
    index("escape_dotdot", {"outside_secret": "../outside.safetensors"})
    index("escape_nested_dotdot", {"outside_secret": "nested/../../outside.safetensors"})
    index("absolute", {"a": "/tmp/model-00001-of-00002.safetensors"})
    index("missing_tensor", {"a": "model-00001-of-00002.safetensors",
                             "zz": "model-00002-of-00002.safetensors"})
    index("not_a_string", {"a": 1, "b": ""})
    index("empty_map", {})

    # ---- tokenizer files (tokenizer_files; first byte: 0 tokenizer.json,
    # 1 / 28 vocab.txt cased / uncased, 2 vocab.json NUL merges.txt) ----
    def tok(name, selector, data):
        out("tokenizer_files", name, bytes([selector]) + (data.encode() if isinstance(data, str)
                                                           else data))

    def byte_chars():
        # GPT-2's byte -> printable character map (printable Latin-1 bytes
        # stand for themselves, the others shift to U+0100 onwards).
        keep = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD))
                + list(range(0xAE, 0x100)))
        chars, extra = {}, 0
        for b in range(256):
            if b in keep:
                chars[b] = chr(b)
            else:
                chars[b] = chr(256 + extra)
                extra += 1
        return chars

    bc = byte_chars()
    gpt2_vocab = {bc[b]: b for b in range(256)}
    sp = bc[ord(" ")]
    gpt2_merges = [sp + " t", "h e", sp + "t he", "l l", "o r", sp + " w"]
    for m in gpt2_merges:
        gpt2_vocab["".join(m.split(" "))] = len(gpt2_vocab)
    gpt2_vocab["<|endoftext|>"] = len(gpt2_vocab)
    gpt2_json = {
        "version": "1.0",
        "added_tokens": [{"id": gpt2_vocab["<|endoftext|>"], "content": "<|endoftext|>",
                          "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
        "post_processor": {"type": "ByteLevel"},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": gpt2_vocab, "merges": gpt2_merges},
    }
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    tok("gpt2_tokenizer_json", 0, json.dumps(gpt2_json, **compact))
    eot = gpt2_vocab["<|endoftext|>"]
    roberta = dict(gpt2_json, pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True},
                   post_processor={"type": "RobertaProcessing", "sep": ["<|endoftext|>", eot],
                                   "cls": ["<|endoftext|>", eot]})
    tok("roberta_tokenizer_json", 3, json.dumps(roberta, **compact))
    tok("gpt2_vocab_json_merges_txt", 2, json.dumps(gpt2_vocab, **compact) + "\0#version: 0.2\n"
        + "\n".join(gpt2_merges) + "\n")

    mark = "\u2581"
    llama_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        llama_vocab["<0x%02X>" % b] = len(llama_vocab)
    llama_merges = [mark + " t", "h e", mark + "t he", "l l", "o r"]
    for piece in [mark, "t", "h", "e", "l", "o", "r", "w", "d"] + ["".join(m.split(" "))
                                                                   for m in llama_merges]:
        llama_vocab.setdefault(piece, len(llama_vocab))
    llama_model = {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True,
                   "vocab": llama_vocab,
                   "merges": llama_merges}
    bos_template = {"type": "TemplateProcessing",
                    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                               {"Sequence": {"id": "A", "type_id": 0}}],
                    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    added = [{"id": i, "content": c, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    tok("llama_legacy_tokenizer_json", 6, json.dumps({
        "version": "1.0", "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": mark},
            {"type": "Replace", "pattern": {"String": " "}, "content": mark}]},
        "pre_tokenizer": None, "post_processor": bos_template,
        "model": llama_model}, **compact))
    tok("llama_metaspace_tokenizer_json", 9, json.dumps({
        "version": "1.0", "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": mark, "prepend_scheme": "first",
                          "split": False},
        "post_processor": bos_template, "model": llama_model}, **compact))

    # Fixed problems (tests/text/tokenizer_test.cc; seen in review, crashes
    # of this fuzzer): a piece id of INT32_MAX (max_id + 1 overflowed, and
    # large ids asked for gigabytes), and ids that are not 32-bit integers
    # (1e30 was a float cast out of range).
    for name, bad in (("crash_llama_id_int32_max", 2147483647), ("crash_llama_id_1e30", "1e30")):
        v = dict(llama_vocab)
        v["<0x00>"] = "@ID@"
        doc = json.dumps({"pre_tokenizer": {"type": "Metaspace"},
                          "model": dict(llama_model, vocab=v)}, **compact)
        tok(name, 0, doc.replace('"@ID@"', str(bad)))

    bert_vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "hello", "world", "un",
                  "##aff", "##able", "##ing", "##s", "caf\u00e9", "\u4e2d", "\u6587", ",", "!",
                  "."] + list("abcdefghijklmnopqrstuvwxyz") + ["##" + c for c in "aeinost"]
    tok("bert_vocab_txt_uncased", 28, "\n".join(bert_vocab) + "\n")
    tok("bert_vocab_txt_cased", 1, "\r\n".join(["Hello"] + bert_vocab) + "\r\n")
    tok("bert_tokenizer_json", 12, json.dumps({
        "version": "1.0",
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                           "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2]},
                                              "[SEP]": {"id": "[SEP]", "ids": [3]}}},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100,
                  "vocab": {t: i for i, t in enumerate(bert_vocab)}}}, **compact))

    # ---- metrics port request heads (metrics_http_request) ----
    heads = {
        "prometheus_scrape": "GET /metrics HTTP/1.1\r\nHost: 10.0.0.7:9090\r\n"
        "User-Agent: Prometheus/2.45.0\r\nAccept: application/openmetrics-text;version=1.0.0,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\nAccept-Encoding: gzip\r\n"
        "X-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n",
        "kubelet_probe": "GET /healthz HTTP/1.1\r\nHost: 10.0.0.7:9090\r\n"
        "User-Agent: kube-probe/1.28\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        "head_http10_lf": "HEAD /healthz HTTP/1.0\n\n",
        "post_with_body": "POST /metrics HTTP/1.1\r\nHost: localhost\r\n"
        "Content-Length: 838860800\r\n\r\nxxxxxxxx",
        "get_chunked": "GET /metrics HTTP/1.1\r\nHost: l\r\nTransfer-Encoding: chunked\r\n\r\n"
        "100\r\n",
        "pipelined": "GET /metrics HTTP/1.1\r\nHost: l\r\nContent-Length: 0\r\n\r\n"
        "GET /healthz HTTP/1.1\r\n\r\n",
        "malformed_headers": "GET /metrics HTTP/1.1\r\nHost: l\r\n folded\r\nBad Header\r\n\r\n",
        "http2_preface": "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "unterminated_headers": "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Pad: "
        + "p" * 3000 + "\r\n",
    }
    for name, head in heads.items():
        out("metrics_http_request", name, head)

    # ---- configs ----
    out("config", "dikkat_decoder", json.dumps({
        "name": "lm", "architecture": "decoder-only", "vocab_size": 259, "d_model": 64,
        "n_heads": 4, "ffn_dim": 256, "max_positions": 512, "tokenizer": "byte",
        "n_layers": 2, "pre_norm": True, "positions": "learned", "activation": "gelu",
        "tie_embeddings": True}))
    out("config", "dikkat_seq2seq", json.dumps({
        "name": "s2s", "architecture": "encoder-decoder", "vocab_size": 100, "d_model": 32,
        "n_heads": 2, "ffn_dim": 64, "max_positions": 128, "n_encoder_layers": 2,
        "n_decoder_layers": 1, "decoder_start_token_id": 0, "positions": "sinusoidal"}))
    out("config", "hf_gpt2", json.dumps({
        "model_type": "gpt2", "vocab_size": 100, "n_embd": 32, "n_head": 4, "n_layer": 2,
        "n_positions": 64, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}))
    out("config", "hf_bert", json.dumps({
        "model_type": "bert", "vocab_size": 100, "hidden_size": 32, "num_attention_heads": 4,
        "num_hidden_layers": 2, "intermediate_size": 64, "max_position_embeddings": 64,
        "type_vocab_size": 2, "hidden_act": "gelu"}))
    out("config", "hf_llama", json.dumps({
        "model_type": "llama", "vocab_size": 100, "hidden_size": 32, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 64,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "rope_scaling": {"type": "linear", "factor": 2.0}, "tie_word_embeddings": False}))
    out("config", "st_pooling", json.dumps({"word_embedding_dimension": 32,
                                            "pooling_mode_mean_tokens": True}))
    out("config", "hf_gemma3", json.dumps({'model_type': 'gemma3_text', 'vocab_size': 100, 'hidden_size': 32, 'intermediate_size': 64, 'num_attention_heads': 2, 'num_key_value_heads': 1, 'head_dim': 16, 'num_hidden_layers': 3, 'max_position_embeddings': 64, 'sliding_window': 8, 'sliding_window_pattern': 3, 'query_pre_attn_scalar': 16, 'rope_local_base_freq': 10000.0, 'rope_scaling': {'rope_type': 'linear', 'factor': 2.0}}))
    out("config", "hf_embeddinggemma", json.dumps({'model_type': 'gemma3_text', 'use_bidirectional_attention': True, 'vocab_size': 100, 'hidden_size': 32, 'intermediate_size': 64, 'num_attention_heads': 2, 'num_key_value_heads': 1, 'head_dim': 16, 'num_hidden_layers': 2, 'max_position_embeddings': 64, 'sliding_window': 8, 'layer_types': ['sliding_attention', 'full_attention']}))
    out("config", "st_dense", json.dumps({'in_features': 32, 'out_features': 16, 'bias': False, 'activation_function': 'torch.nn.modules.linear.Identity'}))
    out("config", "st_modules", json.dumps([{'type': 'sentence_transformers.models.Transformer'}, {'type': 'sentence_transformers.models.Pooling', 'path': '1_Pooling'}, {'type': 'sentence_transformers.models.Dense', 'path': '2_Dense'}, {'type': 'sentence_transformers.models.Normalize'}]))
    out("config", "st_prompts", json.dumps({'prompts': {'query': 'task: search result | query: ', 'document': 'title: none | text: '}, 'default_prompt_name': 'query'}))

    # ---- tokenizer texts ----
    texts = {
        "ascii": "Hello, world! The cat's 123 tests; don't stop.\n\n  two  spaces\ttab",
        "unicode": "caf\u00e9 na\u00efve \u4e2d\u6587 \u0645\u0631\u062d\u0628\u0627 "
                   "\U0001F600 \u00c9COLE r\u00e9sum\u00e9",
        "controls": "a\x00b\x01c\u200bd\ufeffe\r\nf",
        "invalid": b"ab\xff\xfe\xc3(\xe2\x82",
        "bert": "[CLS] unaffable running Hello HELLO hello-world (the) [SEP]",
    }
    for target in ("byte_tokenizer", "gpt2_bpe_tokenizer", "llama_bpe_tokenizer",
                   "wordpiece_tokenizer"):
        for name, text in texts.items():
            out(target, name, text)

    # ---- requests (first byte: RPC in bits 0-1, architecture in bits 2+) ----
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["protoc", "-I", os.path.join(ROOT, "proto"), "--python_out", tmp,
                        "dikkat/v1/dikkat.proto"], check=True)
        sys.path.insert(0, tmp)
        from dikkat.v1 import dikkat_pb2 as pb

        def req(name, rpc, arch, message):
            out("request", name, bytes([rpc | (arch << 2)]) + message.SerializeToString())

        g1 = pb.GenerateRequest(max_new_tokens=5, stop=["\n"], stop_token_ids=[258],
                                top_logprobs=2, echo_prompt_tokens=True)
        g1.input.text = "Once upon a time"
        g1.sampling.temperature = 0.7
        g1.sampling.top_k = 5
        g1.sampling.top_p = 0.9
        g1.sampling.seed = 42
        req("generate_lm", 0, 0, g1)
        g2 = pb.GenerateRequest()
        g2.input.tokens.ids.extend([1, 2, 3])
        g2.decoder_prefix.tokens.ids.extend([0])
        req("generate_seq2seq", 0, 2, g2)
        e = pb.EncodeRequest(pooling=pb.POOLING_MEAN, normalize=True, return_hidden_states=True,
                             hidden_layer=1, output_dtype=pb.DTYPE_BFLOAT16)
        e.inputs.add().text = "hello"
        e.inputs.add().tokens.ids.extend([5, 6, 7])
        req("encode_encoder", 1, 1, e)
        a = pb.AttentionRequest(layers=[0, 1], heads=[1], aggregation=pb.HEAD_AGGREGATION_NONE)
        a.input.text = "attend"
        req("attention_lm", 2, 0, a)
        a2 = pb.AttentionRequest(kind=pb.ATTENTION_KIND_CROSS,
                                 aggregation=pb.HEAD_AGGREGATION_MEAN,
                                 output_dtype=pb.DTYPE_FLOAT16)
        a2.input.text = "source"
        a2.target.tokens.ids.extend([0, 9])
        req("attention_cross", 2, 2, a2)

    chat_template_seeds()
    openai_request_seeds()


def chat_template_seeds():
    """The real chat templates of the reference test, plus small ones."""
    templates = os.path.join(ROOT, "tests", "chat", "data", "chat_templates")
    for name in sorted(os.listdir(templates)):
        if name.endswith(".jinja"):
            with open(os.path.join(templates, name), "rb") as f:
                out("chat_template", name[:-len(".jinja")], f.read())
    small = {
        "loop": "{%- for m in messages -%}{{ loop.index }}:{{ m.role | upper }}\n{%- endfor %}",
        "macro": "{% macro f(x, y=1) %}{{ x ~ y }}{% endmacro %}{{ f('a') }}{{ f(y=2, x='b') }}",
        "namespace": "{% set ns = namespace(n=0) %}{% for i in range(n) %}"
                     "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
        "filters": "{{ tools | map(attribute='function') | list | tojson(indent=2) }}"
                   "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}",
        "strings": "{{ 'a,b'.split(',')[-1] ~ ' x '.strip() ~ 'abc'[::-1] ~ 'é' | title }}",
        "blocks": "{% set t %}{% filter trim %}  x  {% endfilter %}{% endset %}[{{ t }}]"
                  "{% if f > 1 %}no{% elif f %}yes{% else %}none{% endif %}",
        "raise": "{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}",
    }
    for name, source in small.items():
        out("chat_template", name, source)


def openai_request_seeds():
    """Request bodies of the OpenAI-compatible port as clients send them.

    The first byte picks the endpoint (bits 0-1: 0 completions, 1 and 3
    chat, 2 embeddings) and the chat template (bits 2-3: Qwen2.5, Llama 3.1,
    Gemma 2, none); fuzz/openai_request_fuzzer.cc.
    """
    def body(endpoint, template, name, value):
        data = json.dumps(value, ensure_ascii=False).encode()
        out("openai_request", name, bytes([endpoint | template << 2]) + data)

    body(0, 0, "completion", {"model": "fuzz", "prompt": "Once upon a time", "max_tokens": 16,
                              "temperature": 0.7, "top_p": 0.9, "stop": ["\n", "The end"],
                              "seed": 7, "n": 2})
    body(0, 0, "completion_ids_echo", {"prompt": [72, 105, 33], "max_tokens": 4, "echo": True,
                                       "logprobs": 3, "stream": True,
                                       "stream_options": {"include_usage": True}})
    body(0, 0, "completion_batch_of_one", {"prompt": ["Merhaba dünya"], "best_of": 3, "n": 2,
                                           "presence_penalty": 0.5, "frequency_penalty": 0.5,
                                           "top_k": -1, "min_p": 0.05, "ignore_eos": True})
    chat = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the weather in İzmir?"}]
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    tool_turns = chat + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "İzmir"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"t\": 21.5}"}]
    for template, name in [(0, "qwen"), (1, "llama"), (2, "gemma"), (3, "none")]:
        body(1, template, f"chat_{name}", {"model": "fuzz", "messages": chat, "max_tokens": 8,
                                           "logprobs": True, "top_logprobs": 2})
        body(1, template, f"chat_tools_{name}", {"messages": tool_turns, "tools": tools,
                                                 "stream": True, "max_completion_tokens": 4})
    body(3, 0, "chat_parts", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]}]})
    body(1, 2, "chat_gemma_alternation", {"messages": [{"role": "user", "content": "a"},
                                                       {"role": "user", "content": "b"}]})
    body(2, 0, "embeddings_text", {"model": "fuzz", "input": "first text"})
    body(2, 0, "embeddings_list", {"input": ["first", "second"], "encoding_format": "base64"})
    body(2, 0, "embeddings_ids", {"input": [[1, 2, 3], [4, 5]], "encoding_format": "float"})
    body(0, 0, "nested", {"prompt": "x", "stop": [[[[["deep"]]]]]})


if __name__ == "__main__":
    main()
