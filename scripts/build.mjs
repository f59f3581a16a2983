// The package's build (`npm run build`, run by `npm pack`): lib/ into dist/.
//
// 1. tsc, twice (tsconfig.build.json): the JavaScript without comments, then
//    the declarations with their TSDoc.
// 2. dist/zod.js: lib/zod.ts bundled with zod by esbuild (minified, ESM), so
//    the package installs without zod: zod ships 6 MB (its sources, locales,
//    the v3 and mini builds), of which the bundle keeps what the package's
//    modules use. zod's MIT notice heads the file.
// 3. The console's static files (lib/console/assets) and uPlot's built
//    script and style sheet into dist/console/assets, served from there.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = path.join(root, 'dist');
const require = createRequire(import.meta.url);
const tsc = (...args) =>
  execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json', ...args], {
    cwd: root,
    stdio: 'inherit',
  });

fs.rmSync(dist, { recursive: true, force: true });
tsc('--removeComments', '--declaration', 'false');
tsc('--emitDeclarationOnly');

const zodPackage = require.resolve('zod/package.json');
const zodVersion = JSON.parse(fs.readFileSync(zodPackage, 'utf8')).version;
const zodLicense = fs.readFileSync(path.join(path.dirname(zodPackage), 'LICENSE'), 'utf8').trim();
await build({
  entryPoints: [path.join(root, 'lib/zod.ts')],
  outfile: path.join(dist, 'zod.js'),
  bundle: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  minify: true,
  legalComments: 'none',
  banner: { js: `/*! zod ${zodVersion} bundled by pg-lambda-outbox (https://zod.dev).\n${zodLicense}\n*/` },
  logLevel: 'warning',
});

const assets = path.join(root, 'lib/console/assets');
if (fs.existsSync(assets)) {
  fs.cpSync(assets, path.join(dist, 'console/assets'), { recursive: true });
  const vendor = path.join(dist, 'console/assets/vendor');
  fs.mkdirSync(vendor, { recursive: true });
  for (const file of ['uPlot.iife.min.js', 'uPlot.min.css']) {
    fs.copyFileSync(require.resolve(`uplot/dist/${file}`), path.join(vendor, file));
  }
  fs.copyFileSync(require.resolve('uplot/LICENSE'), path.join(vendor, 'uPlot.LICENSE'));
}
