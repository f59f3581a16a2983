/**
 * The dependency budget of a service that only writes events: packs this
 * package (`npm pack`, which builds dist/), installs `<tarball> pg` into a
 * scratch project outside the repository (dependencies from the registry,
 * nothing from this checkout), and measures its node_modules:
 *
 * - size in MB (10^6 bytes), the apparent size (`du --apparent-size`, the sum
 *   of file sizes, the same on any file system) and the on-disk size (`du`,
 *   whole blocks, what the disk gives up);
 * - packages installed (entries of npm's hidden lock file,
 *   node_modules/.package-lock.json);
 * - the largest packages, to show where the megabytes are.
 *
 * Then it checks that the install works: the producer's import, every entry
 * point loads with no AWS SDK or node-pg-migrate installed, a feature that
 * needs one fails with a ConfigError naming the package, and the `bin`
 * answers `--help`. A failed check fails the script.
 *
 * Merges `install` (producer_only_mb, producer_only_disk_mb,
 * producer_only_packages, ...) into bench/results.json, keeping every other
 * key. Target: producer_only_mb <= 8.
 *
 * Run: `npm run bench:install`. BENCH_KEEP=1 keeps the scratch project.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const RESULTS = new URL('./results.json', import.meta.url);
const TARGET_MB = 8;
const log = (line: string) => process.stderr.write(`${line}\n`);
const mb = (bytes: number) => +(bytes / 1e6).toFixed(2);
const npmEnv = {
  ...process.env,
  NPM_CONFIG_UPDATE_NOTIFIER: 'false',
  NPM_CONFIG_FUND: 'false',
  NPM_CONFIG_AUDIT: 'false',
};
const run = (cmd: string, args: string[], cwd: string) =>
  execFileSync(cmd, args, { cwd, env: npmEnv, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

/** The pg this checkout resolved, so the measurement does not move with pg's releases. */
const pgVersion = JSON.parse(
  fs.readFileSync(path.join(ROOT, 'node_modules/pg/package.json'), 'utf8'),
).version;

// --- pack and install ----------------------------------------------------------
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-install-size-'));
log(`npm pack (builds dist/) into ${work}`);
const packed = JSON.parse(run('npm', ['pack', '--json', '--pack-destination', work], ROOT)) as Array<{
  filename: string;
  size: number;
  unpackedSize: number;
  entryCount: number;
}>;
const pack = packed[0]!;
const tarball = path.join(work, path.basename(pack.filename));
const project = path.join(work, 'producer');
fs.mkdirSync(project);
fs.writeFileSync(
  path.join(project, 'package.json'),
  `${JSON.stringify({ name: 'producer', version: '1.0.0', private: true, type: 'module' }, null, 2)}\n`,
);
log(`npm i ${path.basename(tarball)} pg@${pgVersion}`);
run('npm', ['install', tarball, `pg@${pgVersion}`], project);

// --- measure -------------------------------------------------------------------
const nodeModules = path.join(project, 'node_modules');
/** `du -s` in bytes: apparent (sum of file sizes) or on disk (allocated blocks). */
const du = (dir: string, apparent: boolean) =>
  Number(run('du', ['-s', '-B1', ...(apparent ? ['--apparent-size'] : []), dir], project).split('\t')[0]);
const apparentBytes = du(nodeModules, true);
const diskBytes = du(nodeModules, false);
const hiddenLock = JSON.parse(fs.readFileSync(path.join(nodeModules, '.package-lock.json'), 'utf8')) as {
  packages: Record<string, { version?: string }>;
};
const packages = Object.keys(hiddenLock.packages).filter((p) => p.startsWith('node_modules/'));
const names = packages.map((p) => p.slice(p.lastIndexOf('node_modules/') + 'node_modules/'.length)).sort();
const largest = packages
  .map((p) => ({ name: p.slice('node_modules/'.length), mb: mb(du(path.join(project, p), true)) }))
  .sort((a, b) => b.mb - a.mb)
  .slice(0, 8);

// --- check that it works ---------------------------------------------------------
const failures: string[] = [];
const check = (name: string, script: string, expect: (output: string) => boolean) => {
  const file = path.join(project, `${name}.mjs`);
  fs.writeFileSync(file, script);
  let output: string;
  try {
    output = run('node', [file], project);
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string };
    output = `${e.stdout ?? ''}${e.stderr ?? ''}`;
  }
  const ok = expect(output);
  log(`  ${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : `\n${output}`}`);
  if (!ok) failures.push(name);
};
log('checks in the scratch project:');
check(
  'producer-import',
  `import { enqueueEvents, withTransaction } from 'pg-lambda-outbox';
console.log(typeof enqueueEvents, typeof withTransaction);`,
  (out) => out.trim() === 'function function',
);
const entryPoints = [
  'pg-lambda-outbox',
  ...['consumer', 'relay', 'operations', 'lambda', 'contracts', 'testing', 'prisma', 'console'].map(
    (e) => `pg-lambda-outbox/${e}`,
  ),
];
check(
  'entry-points-load',
  `for (const name of ${JSON.stringify(entryPoints)}) {
  const m = await import(name);
  console.log(name, Object.keys(m).length);
}`,
  (out) => entryPoints.every((e) => new RegExp(`^${e} [1-9]`, 'm').test(out)),
);
// zod is bundled into the package (dist/zod.js), not installed: validation
// still runs and still names the field.
check(
  'validation-without-zod-installed',
  `import { parseRoutes } from 'pg-lambda-outbox/relay';
import fs from 'node:fs';
console.log('zod installed:', fs.existsSync('node_modules/zod'));
try {
  parseRoutes([{ match: 'order.*', targets: [{ type: 'sqs', queueUrl: 'not a url' }] }]);
} catch (error) {
  console.log(error.name, error.message);
}`,
  (out) => /^zod installed: false$/m.test(out) && /queueUrl/.test(out),
);
check(
  'aws-feature-names-package',
  `import { databaseConfig } from 'pg-lambda-outbox/lambda';
try {
  await databaseConfig({ DATABASE_SECRET_ARN: 'arn:aws:secretsmanager:us-east-1:1:secret:x' });
} catch (error) {
  console.log(error.name, error.message);
}`,
  (out) =>
    /^ConfigError DATABASE_SECRET_ARN: @aws-sdk\/client-secrets-manager is not installed: npm i @aws-sdk\/client-secrets-manager$/m.test(
      out,
    ),
);
check(
  'iam-auth-names-package',
  `import { databaseConfig } from 'pg-lambda-outbox/lambda';
try {
  await databaseConfig({ DATABASE_URL: 'postgres://app@db.example.com/app', DATABASE_IAM_AUTH: 'true', AWS_REGION: 'us-east-1' });
} catch (error) {
  console.log(error.name, error.message);
}`,
  (out) =>
    /^ConfigError DATABASE_IAM_AUTH: @aws-sdk\/rds-signer is not installed: npm i @aws-sdk\/rds-signer$/m.test(
      out,
    ),
);
check(
  'migrate-names-package',
  `import { migrate } from 'pg-lambda-outbox';
try {
  await migrate({ databaseUrl: 'postgres://app@127.0.0.1:1/app' });
} catch (error) {
  console.log(error.name, error.message);
}`,
  (out) => /^ConfigError migrate\(\): node-pg-migrate is not installed: npm i node-pg-migrate$/m.test(out),
);
check(
  'bin-help',
  `import { execFileSync } from 'node:child_process';
console.log(execFileSync('npx', ['--no-install', 'pg-lambda-outbox', '--help'], { encoding: 'utf8' }));`,
  (out) => /Usage: pg-lambda-outbox/.test(out) && /\bstatus\b/.test(out) && /\bmigrate\b/.test(out),
);

// --- report and merge ------------------------------------------------------------
const install = {
  producer_only_mb: mb(apparentBytes),
  producer_only_disk_mb: mb(diskBytes),
  producer_only_packages: packages.length,
  target_mb: TARGET_MB,
  method:
    'npm pack, then npm i <tarball> pg in an empty project outside the repo; MB = 10^6 bytes of node_modules, du --apparent-size (disk: du, allocated blocks); packages = entries of node_modules/.package-lock.json',
  packages: names,
  largest_mb: Object.fromEntries(largest.map((l) => [l.name, l.mb])),
  tarball_kb: Math.round(pack.size / 1000),
  tarball_unpacked_kb: Math.round(pack.unpackedSize / 1000),
  tarball_files: pack.entryCount,
  pg: pgVersion,
  node: process.version,
  npm: run('npm', ['--version'], project).trim(),
  date: new Date().toISOString(),
  checks_failed: failures,
};
const previous = fs.existsSync(RESULTS) ? JSON.parse(fs.readFileSync(RESULTS, 'utf8')) : {};
// \`before\` (the figures before the budget work, measured once) is kept as it is.
const before = previous.install?.before;
fs.writeFileSync(RESULTS, `${JSON.stringify({ ...previous, install: { ...install, before } }, null, 2)}\n`);

console.log('\n| metric | value | target | met |\n|---|---:|---|---|');
console.log(
  `| install.producer_only_mb | ${install.producer_only_mb} | <= ${TARGET_MB} | ${install.producer_only_mb <= TARGET_MB ? 'yes' : 'NO'} |`,
);
console.log(`| install.producer_only_disk_mb | ${install.producer_only_disk_mb} | | |`);
console.log(`| install.producer_only_packages | ${install.producer_only_packages} | | |`);
console.log(`\npackages: ${names.join(', ')}`);
console.log(`largest (MB): ${largest.map((l) => `${l.name} ${l.mb}`).join(', ')}`);
log('\nmerged install into bench/results.json');

if (process.env.BENCH_KEEP === '1') log(`scratch project kept: ${project}`);
else fs.rmSync(work, { recursive: true, force: true });
if (failures.length > 0) {
  log(`checks failed: ${failures.join(', ')}`);
  process.exitCode = 1;
}
