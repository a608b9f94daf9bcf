// The reference renderer for the chat-template tests: Hugging Face's @huggingface/jinja.
// Usage: node oracle.mjs <path of @huggingface/jinja> <cases.json> <expected.json>
// cases.json: {"templates": ["source", ...], "cases": [{"template": i, "context": {...}}, ...]}
// expected.json: one entry per case, {"ok": true, "output": "..."} or {"ok": false, "error": "..."}.
// A template that does not parse gives every one of its cases {"ok": false}.
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [jinjaDir, casesPath, outPath] = process.argv.slice(2);
const { Template } = await import(pathToFileURL(join(jinjaDir, "dist", "index.js")).href);
const input = JSON.parse(readFileSync(casesPath, "utf8"));

const parsed = input.templates.map((source) => {
  try {
    return { template: new Template(source) };
  } catch (e) {
    return { error: `parse: ${e && e.message}` };
  }
});

const results = input.cases.map(({ template, context }) => {
  const t = parsed[template];
  if (t.error) return { ok: false, error: t.error };
  try {
    // A lone surrogate (from indexing into a character outside the BMP) becomes U+FFFD, as it
    // does whenever the output is written as UTF-8.
    return { ok: true, output: t.template.render(context).toWellFormed() };
  } catch (e) {
    return { ok: false, error: `render: ${e && e.message}`.toWellFormed() };
  }
});
writeFileSync(outPath, JSON.stringify(results));
