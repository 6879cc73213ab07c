// Build the dashboard into ../tb_attention_plugin/static (index.js ES module + index.css).
// `node build.mjs --check` builds in memory and fails if the committed files differ.
import * as esbuild from "esbuild";
import { readFileSync, mkdirSync, writeFileSync, existsSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const outdir = join(here, "..", "tb_attention_plugin", "static");
const check = process.argv.includes("--check");

const result = await esbuild.build({
  entryPoints: { index: join(here, "src", "index.ts") },
  bundle: true,
  format: "esm",
  platform: "browser",
  target: ["es2020", "chrome100", "firefox100", "safari15"],
  minify: true,
  legalComments: "none",
  charset: "utf8",
  sourcemap: false,
  outdir,
  write: false,
  logLevel: "warning",
});

let stale = [];
for (const f of result.outputFiles) {
  const name = relative(outdir, f.path);
  const body = Buffer.from(f.contents);
  if (check) {
    const old = existsSync(f.path) ? readFileSync(f.path) : null;
    if (!old || !old.equals(body)) stale.push(name);
  } else {
    mkdirSync(dirname(f.path), { recursive: true });
    writeFileSync(f.path, body);
    console.log(`wrote ${relative(join(here, ".."), f.path)} (${body.length} bytes)`);
  }
}
if (check) {
  if (stale.length) {
    console.error(`error: the committed bundle is stale: ${stale.join(", ")}; run 'npm run build' in frontend/ and commit tb_attention_plugin/static`);
    process.exit(1);
  }
  console.log("bundle is up to date");
}
