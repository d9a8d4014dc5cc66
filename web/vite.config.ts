// Builds the page as one classic script (app.js), one stylesheet (app.css) and
// index.html, into the Python package (src/octlm/web_dist), so that
// `pip install octlm` brings a working `octlm serve` without Node. Classic
// scripts (not ES modules) keep the exported page working from file://.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import type { Plugin } from "vite";
import { defineConfig } from "vitest/config";

const here = import.meta.dirname;

/** Writes index.html next to the bundle, pointing at app.css and app.js instead of the dev entry, and run-data.js
 * that sets nothing (octlm serve and export-web write their own): src/octlm/web_dist/index.html opened as a file
 * shows the playgrounds with no missing file. */
function pageHtml(): Plugin {
  return {
    name: "octlm-page-html",
    apply: "build",
    generateBundle() {
      const source = readFileSync(resolve(here, "index.html"), "utf8");
      const html = source
        .replace("<!-- octlm:styles -->", '<link rel="stylesheet" href="app.css" />')
        .replace(/<!-- octlm:app -->.*\n/, '<script src="app.js"></script>\n');
      this.emitFile({ type: "asset", fileName: "index.html", source: html });
      this.emitFile({ type: "asset", fileName: "run-data.js", source: readFileSync(resolve(here, "run-data.js"), "utf8") });
    },
  };
}

export default defineConfig({
  plugins: [pageHtml()],
  build: {
    outDir: process.env.OCTLM_WEB_OUT ?? resolve(here, "../src/octlm/web_dist"),
    emptyOutDir: true,
    copyPublicDir: false,
    target: "es2020",
    lib: {
      entry: resolve(here, "src/main.ts"),
      formats: ["iife"],
      name: "octlmPage",
      fileName: () => "app.js",
      cssFileName: "app",
    },
  },
  test: {
    include: ["test/**/*.test.ts"],
  },
});
