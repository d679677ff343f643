#!/usr/bin/python3
"""Reference outputs for tests/model/tokenizer*_test.cc, computed by third-party
code (CPython's UTF-8 codec, Debian's python3-sentencepiece) on inputs the C++
test writes. Usage: tokenizer_reference.py <command> <in> <out>.

  utf8  in: JSON list of hex byte strings.
        out: JSON list of {"valid": bool, "replaced": str} where "replaced" is
        bytes.decode("utf-8", errors="replace") (Unicode's maximal-subpart rule).
"""
import json
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


COMMANDS = {"utf8": utf8}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit("usage: tokenizer_reference.py {%s} ARGS..." % ",".join(COMMANDS))
    COMMANDS[sys.argv[1]](*sys.argv[2:])
