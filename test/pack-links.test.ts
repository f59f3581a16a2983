// Every relative link in the Markdown the package ships (README.md, docs/)
// leads to a file in the tarball, and every #anchor to a heading of that file
// (GitHub's heading ids), so a reader of the installed package, or of its page
// on the registry, never lands on a file that was left out.
//
// The file list is npm's own (`npm pack --dry-run --json`), with
// `--ignore-scripts` so that prepack's build does not run: the Markdown files
// are packed as they are, and dist/ holds no Markdown.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const npmEnv = { ...process.env, NPM_CONFIG_UPDATE_NOTIFIER: 'false', NPM_CONFIG_FUND: 'false' };

function packedFiles(): string[] {
  const output = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: root,
    env: npmEnv,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const [pack] = JSON.parse(output) as Array<{ files: Array<{ path: string }> }>;
  return pack!.files.map((f) => f.path);
}

/** The text outside fenced code blocks and inline code, line by line (line numbers kept). */
function proseLines(markdown: string): string[] {
  let fence: string | undefined;
  return markdown.split('\n').map((line) => {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence !== undefined) {
      if (marker?.startsWith(fence)) fence = undefined;
      return '';
    }
    if (marker !== undefined) {
      fence = marker;
      return '';
    }
    return line.replace(/(`+)[^`]*?\1/g, '');
  });
}

/** GitHub's id for a heading (github-slugger): lowercase, punctuation dropped, spaces as hyphens. */
function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link reads as its text
    .replace(/<[^>]+>/g, '')
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '').replace(/ /g, '-');
}

/** The anchors a file offers: its headings' ids (repeats get -1, -2, ...) and explicit `<a id>`s. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fence: string | undefined;
  for (const line of markdown.split('\n')) {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence !== undefined) {
      if (marker?.startsWith(fence)) fence = undefined;
      continue;
    }
    if (marker !== undefined) {
      fence = marker;
      continue;
    }
    const heading = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading !== undefined) {
      const base = slug(heading);
      const n = seen.get(base) ?? 0;
      seen.set(base, n + 1);
      anchors.add(n === 0 ? base : `${base}-${n}`);
    }
    for (const m of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1]!);
  }
  return anchors;
}

interface Link {
  file: string;
  line: number;
  target: string;
}

function linksOf(file: string, markdown: string): Link[] {
  const links: Link[] = [];
  proseLines(markdown).forEach((text, i) => {
    const inline = [...text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1]!);
    const reference = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/.exec(text)?.[1];
    for (const target of reference ? [...inline, reference] : inline) {
      links.push({ file, line: i + 1, target });
    }
  });
  return links;
}

const external = (target: string) => /^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//');

/** What is wrong with a link, or undefined when it resolves inside the tarball. */
function problem(link: Link, files: Set<string>, read: (file: string) => string): string | undefined {
  const hash = link.target.indexOf('#');
  const pathPart = decodeURI(hash < 0 ? link.target : link.target.slice(0, hash));
  const anchor = hash < 0 ? undefined : decodeURIComponent(link.target.slice(hash + 1));
  const resolved =
    pathPart === ''
      ? link.file
      : path.posix.normalize(path.posix.join(path.posix.dirname(link.file), pathPart));
  const dir = resolved.replace(/\/$/, '');
  const isFile = files.has(resolved);
  if (!isFile && ![...files].some((f) => f.startsWith(`${dir}/`))) return `${resolved} is not in the tarball`;
  if (anchor === undefined || anchor === '' || !isFile || !resolved.endsWith('.md')) return undefined;
  return anchorsOf(read(resolved)).has(anchor) ? undefined : `${resolved} has no heading #${anchor}`;
}

describe('the Markdown the package ships', () => {
  it('links only to files (and headings) inside the tarball', () => {
    const files = new Set(packedFiles());
    const markdown = [...files].filter((f) => f.endsWith('.md')).sort();
    expect(markdown).toContain('README.md');
    expect(markdown).toContain('docs/library.md');
    const cache = new Map<string, string>();
    const read = (file: string) => {
      let text = cache.get(file);
      if (text === undefined) {
        text = fs.readFileSync(path.join(root, file), 'utf8');
        cache.set(file, text);
      }
      return text;
    };
    const links = markdown.flatMap((file) => linksOf(file, read(file))).filter((l) => !external(l.target));
    expect(links.length).toBeGreaterThan(50);
    const broken = links.flatMap((link) => {
      const why = problem(link, files, read);
      return why ? [`${link.file}:${link.line} (${link.target}): ${why}`] : [];
    });
    expect(broken).toEqual([]);
  });

  it("library.md's table of what is public has a row for every entry point, and the install figures are bench:install's", () => {
    const library = fs.readFileSync(path.join(root, 'docs/library.md'), 'utf8');
    const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as {
      name: string;
      exports: Record<string, unknown>;
    };
    const entries = Object.keys(pkg.exports)
      .filter((e) => e !== './package.json')
      .map((e) => (e === '.' ? pkg.name : `${pkg.name}/${e.slice(2)}`));
    expect(entries.length).toBeGreaterThan(10);
    const rows = new Set([...library.matchAll(/^\| `([^`]+)` \|/gm)].map((m) => m[1]));
    expect(entries.filter((e) => !rows.has(e))).toEqual([]);
    const { install } = JSON.parse(fs.readFileSync(path.join(root, 'bench/results.json'), 'utf8')) as {
      install: { producer_only_mb: number; producer_only_packages: number };
    };
    const figure = `${install.producer_only_mb.toFixed(2)} MB`;
    for (const file of ['README.md', 'docs/library.md', 'docs/contributing.md', 'docs/benchmarks.md']) {
      const text = fs.readFileSync(path.join(root, file), 'utf8').replace(/\s+/g, ' ');
      expect(text, file).toContain(figure);
      // benchmarks.md gives the count in its table.
      if (file !== 'docs/benchmarks.md')
        expect(text, file).toContain(`${install.producer_only_packages} packages`);
    }
  });

  it('reads headings as GitHub names them', () => {
    expect(slug('Direct calls')).toBe('direct-calls');
    expect(slug('`createConsumer` options, and `handleMessages`')).toBe(
      'createconsumer-options-and-handlemessages',
    );
    expect(slug('Packaging offline (`serverless package`)')).toBe('packaging-offline-serverless-package');
    expect(slug('A [linked](x.md) heading: 1.5 µs!')).toBe('a-linked-heading-15-µs');
    const files = new Set(['docs/a.md', 'docs/b.md', 'migrations/1.sql']);
    const read = () => '# Top\n\n## Install size\n';
    const check = (target: string) => problem({ file: 'docs/a.md', line: 1, target }, files, read);
    expect(check('b.md#install-size')).toBeUndefined();
    expect(check('#top')).toBeUndefined();
    expect(check('../migrations/')).toBeUndefined();
    expect(check('b.md#figures')).toBe('docs/b.md has no heading #figures');
    expect(check('c.md')).toBe('docs/c.md is not in the tarball');
    expect(check('../test/x.test.ts')).toBe('test/x.test.ts is not in the tarball');
    expect([...anchorsOf('# A\n## A\n```\n# not a heading\n```\n')]).toEqual(['a', 'a-1']);
  });
});
