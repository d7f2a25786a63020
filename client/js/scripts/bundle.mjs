// The browser bundle (ESM, minified) and its size: `npm run bundle` prints one JSON line.
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { mkdirSync, writeFileSync } from "node:fs";

const root = new URL("..", import.meta.url).pathname;
const out = await build({
  entryPoints: [root + "src/index.ts"],
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  platform: "browser",
  write: false,
});
const code = out.outputFiles[0].contents;
mkdirSync(root + "build", { recursive: true });
writeFileSync(root + "build/ldptel.min.js", code);
const gz = gzipSync(code, { level: 9 }).length;
console.log(JSON.stringify({ figure: "bundle_min_gzip_bytes", value: gz, min_bytes: code.length, limit: 20480 }));
if (gz > 20480) {
  console.error(`bundle is ${gz} bytes min+gzip, above the 20 KB limit`);
  process.exit(1);
}
