// The SDK's lint beyond `tsc --strict`: no Math.random anywhere (privatization and ids use
// crypto.getRandomValues only), no `any` in the library source, no console output from the library.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

const root = process.env.LDPTEL_LINT_ROOT ?? new URL("..", import.meta.url).pathname;
const rules = [
  { re: /Math\s*(\.\s*random|\[\s*["'`]random["'`]\s*\])/, dirs: ["src", "test", "scripts", "bench"], why: "Math.random is not a CSPRNG: use crypto.getRandomValues (src/random.ts)" },
  { re: /:\s*any\b|as any\b|<any>/, dirs: ["src"], why: "no `any` in the library" },
  { re: /\bconsole\.(log|info|debug)\b/, dirs: ["src"], why: "the library does not print (use on_error)" },
];
const self = join(root, "scripts", "lint.mjs");
let bad = 0;
function walk(dir, out) {
  let names;
  try {
    names = readdirSync(dir);
  } catch {
    return out;
  }
  for (const name of names) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path, out);
    else if (/\.(ts|mjs|js|html)$/.test(name) && path !== self) out.push(path);
  }
  return out;
}
for (const rule of rules) {
  for (const dir of rule.dirs) {
    for (const file of walk(join(root, dir), [])) {
      readFileSync(file, "utf8").split("\n").forEach((line, i) => {
        if (rule.re.test(line)) {
          console.error(`${file}:${i + 1}: ${rule.why}\n    ${line.trim()}`);
          bad += 1;
        }
      });
    }
  }
}
if (bad) {
  console.error(`lint: ${bad} problem(s)`);
  process.exit(1);
}
console.log("lint: ok (no Math.random, no any, no console output in src)");
