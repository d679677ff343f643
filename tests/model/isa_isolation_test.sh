#!/usr/bin/env bash
# The per-ISA kernel files must hold only their ISA's instructions: a single
# AVX-512 instruction in the AVX2 kernels (GCC emits EVEX encodings and
# zmm/ymm16-31/mask registers once avx512* is enabled for a function, e.g.
# through a target attribute too wide, or a template compiled in the wrong
# file) is SIGILL on an AVX2-only CPU, which the machine running this may not
# be able to show. So the object files are disassembled and checked:
#   cpu_kernels_avx2.cc.o     no zmm, no xmm/ymm16-31, no k mask registers
#   cpu_kernels_generic.cc.o  none of those, and no ymm either (baseline SSE2)
#   cpu_kernels.cc.o, cpu_isa.cc.o  (routing, run on every CPU) likewise
# usage: isa_isolation_test.sh OBJECT...   (the objects of dikkat_model)
set -euo pipefail
avx512='zmm|[xy]mm(1[6-9]|2[0-9]|3[01])\b|%k[1-7]\b'
checked=0
fail=0
# CMake passes $<TARGET_OBJECTS:...> as one ;-separated argument.
IFS=';' read -r -a objects <<< "$*"
for obj in "${objects[@]}"; do
  case $(basename "$obj") in
    cpu_kernels_avx2.cc.o) pattern=$avx512 ;;
    cpu_kernels_generic.cc.o | cpu_kernels.cc.o | cpu_isa.cc.o) pattern="$avx512|ymm" ;;
    *) continue ;;
  esac
  checked=$((checked + 1))
  hits=$(objdump -d --no-show-raw-insn "$obj" | grep -cE "$pattern" || true)
  if [ "$hits" -ne 0 ]; then
    echo "FAIL: $(basename "$obj") has $hits instructions beyond its ISA, e.g.:"
    objdump -d --no-show-raw-insn "$obj" | grep -E "$pattern" | head -5
    fail=1
  else
    echo "ok: $(basename "$obj")"
  fi
done
if [ "$checked" -ne 4 ]; then
  echo "FAIL: expected 4 kernel objects, checked $checked"
  exit 1
fi
if [ "$fail" -ne 0 ]; then exit 1; fi
