#!/usr/bin/python3
"""Reference outputs for tests/model/tokenizer*_test.cc, computed by third-party
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


def spm(inp, out):
    import sentencepiece

    args = json.load(open(inp))
    workdir = args["dir"]
    train_txt = os.path.join(workdir, "spm_train.txt")
    with open(train_txt, "w", encoding="utf-8") as f:
        for path in sorted(glob.glob("/usr/share/common-licenses/*")):
            if os.path.isfile(path):
                f.write(open(path, encoding="utf-8", errors="ignore").read())
        # Repeat the test corpus so its characters (Turkish letters, CJK,
        # emoji) reach the character coverage of the trainer.
        for _ in range(5):
            f.write("\n".join(args["corpus"]) + "\n")
    configs = {
        "unigram": dict(model_type="unigram", vocab_size=800),
        "bpe_byte_fallback": dict(model_type="bpe", vocab_size=800, byte_fallback=True,
                                  normalization_rule_name="identity",
                                  remove_extra_whitespaces=False, split_digits=True),
    }
    result = {}
    for name, cfg in configs.items():
        prefix = os.path.join(workdir, name)
        sentencepiece.SentencePieceTrainer.train(
            input=train_txt, model_prefix=prefix, pad_id=3, character_coverage=0.9995,
            minloglevel=2, **cfg)
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


COMMANDS = {"utf8": utf8, "spm": spm}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit("usage: tokenizer_reference.py {%s} ARGS..." % ",".join(COMMANDS))
    COMMANDS[sys.argv[1]](*sys.argv[2:])
