// Reference encodings from Hugging Face tokenizers (its Node binding) for ferry's differential
// tokenizer tests. Usage: node hf_reference.js JOB.json RESULT.json
//   JOB:    {"module": "<path of node_modules/tokenizers>", "tokenizers": {"name": "<tokenizer.json>"},
//            "texts": ["...", ...]}
//   RESULT: {"name": {"plain": [[ids]...], "special": [[ids]...], "decoded": ["..."...]}}
// plain: encode(text) without special tokens; special: with them; decoded: decode(plain ids) with
// special tokens rendered.
'use strict';
const fs = require('fs');

async function main() {
  const [jobPath, resultPath] = process.argv.slice(2);
  const job = JSON.parse(fs.readFileSync(jobPath, 'utf8'));
  const { Tokenizer } = require(job.module);
  const result = {};
  for (const [name, file] of Object.entries(job.tokenizers)) {
    const tokenizer = Tokenizer.fromFile(file);
    const out = { plain: [], special: [], decoded: [] };
    for (const text of job.texts) {
      const plain = Array.from((await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds());
      const special = Array.from((await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds());
      out.plain.push(plain);
      out.special.push(special);
      out.decoded.push(await tokenizer.decode(plain, false));
    }
    result[name] = out;
  }
  fs.writeFileSync(resultPath, JSON.stringify(result));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
