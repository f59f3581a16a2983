import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { SECURITY_HEADERS } from './http.js';

// The console's pages: a few static files (lib/console/assets, copied to
// dist/console/assets by the build) and uPlot for the charts. No front-end
// build and no CDN: the files are served as they are, from the package.

const ASSETS = new URL('./assets/', import.meta.url);

/** Each file the console serves, by its path under `/assets/` ('' is the page itself). */
const FILES: Readonly<Record<string, { file: string; type: string; vendor?: string }>> = {
  '': { file: 'index.html', type: 'text/html; charset=utf-8' },
  'app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
  'ui.js': { file: 'ui.js', type: 'text/javascript; charset=utf-8' },
  'app.css': { file: 'app.css', type: 'text/css; charset=utf-8' },
  'vendor/uPlot.iife.min.js': {
    file: 'vendor/uPlot.iife.min.js',
    type: 'text/javascript; charset=utf-8',
    vendor: 'uplot/dist/uPlot.iife.min.js',
  },
  'vendor/uPlot.min.css': {
    file: 'vendor/uPlot.min.css',
    type: 'text/css; charset=utf-8',
    vendor: 'uplot/dist/uPlot.min.css',
  },
};

/**
 * The pages' policy: scripts and styles from the console itself only (no
 * inline script), data from its own API, nothing framed, no form posted
 * anywhere. uPlot sets element styles through the CSSOM, which a
 * `style-src 'self'` allows.
 */
const PAGE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const cache = new Map<string, Buffer>();

/** Where a file is: in assets/, else (running from the sources) uPlot's own copy in node_modules. */
async function load(name: string): Promise<Buffer> {
  const entry = FILES[name] as (typeof FILES)[string];
  try {
    return await readFile(new URL(entry.file, ASSETS));
  } catch (error) {
    if (entry.vendor === undefined || (error as { code?: string }).code !== 'ENOENT') throw error;
    return readFile(createRequire(fileURLToPath(import.meta.url)).resolve(entry.vendor));
  }
}

/**
 * The static response for a path under the console's base (`/` or
 * `/assets/<file>`), or undefined when the path is not one of its files.
 * Files are read once and kept (they are small: about 80 kB in all).
 */
export async function staticFile(path: string): Promise<Response | undefined> {
  const name = path === '/' ? '' : path.startsWith('/assets/') ? path.slice('/assets/'.length) : undefined;
  if (name === undefined || !Object.hasOwn(FILES, name)) return undefined;
  let body = cache.get(name);
  if (body === undefined) {
    body = await load(name);
    cache.set(name, body);
  }
  return new Response(new Uint8Array(body), {
    status: 200,
    headers: {
      'content-type': (FILES[name] as (typeof FILES)[string]).type,
      'content-security-policy': PAGE_CSP,
      ...SECURITY_HEADERS,
    },
  });
}
