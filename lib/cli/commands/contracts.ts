import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Command } from 'commander';
import { parseRoutes } from '../../config/relay-config.js';
import { isEventContracts } from '../../contracts/define.js';
import { asyncApiDocument, type JsonSchemaTarget, jsonSchemas } from '../../contracts/publish.js';
import { ConfigError } from '../../errors.js';
import { print } from '../shared.js';

/** The contracts a module exports: the named export, else `events`, else the default export. */
async function loadContracts(modulePath: string, exportName: string | undefined) {
  const url = pathToFileURL(path.resolve(modulePath)).href;
  let module: Record<string, unknown>;
  try {
    module = (await import(url)) as Record<string, unknown>;
  } catch (error) {
    throw new ConfigError('--module', `could not import ${modulePath}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  const names = exportName ? [exportName] : ['events', 'default'];
  for (const name of names) {
    const value = module[name];
    if (isEventContracts(value)) return value;
  }
  throw new ConfigError(
    exportName ? '--export' : '--module',
    `${modulePath} exports no defineEvents(...) result as ${names.map((n) => `"${n}"`).join(' or ')} (exports: ${Object.keys(module).join(', ') || 'none'})`,
  );
}

/**
 * Publishes the event contracts of a module as one JSON Schema per event
 * type and version, and an AsyncAPI 3 document of the queues and buses they
 * go to. Needs no database.
 */
export function contractsCommand(cli: Command): void {
  cli
    .command('contracts')
    .description(
      'write the JSON Schema of each event type and an AsyncAPI 3 document from a module that exports defineEvents(...) (no database needed)',
    )
    .requiredOption('--module <file>', 'the compiled module (.js/.mjs) that exports the contracts')
    .option('--export <name>', 'the export holding them (default: events, else the default export)')
    .option('--out <dir>', 'where to write schemas/<type>.v<n>.json and asyncapi.json', 'contracts')
    .option('--title <title>', "the AsyncAPI document's title", 'Outbox events')
    .option('--doc-version <version>', "the AsyncAPI document's version", '1.0.0')
    .option(
      '--routes <json>',
      "routes to describe as channels (OUTBOX_ROUTES JSON; default: the contracts' own targets)",
    )
    .option('--source <source>', 'the EventBridge source of the relay (OUTBOX_EVENT_SOURCE)', 'outbox')
    .option(
      '--target <dialect>',
      'JSON Schema dialect of the schema files: draft-2020-12 or draft-07',
      'draft-2020-12',
    )
    .action(
      async (options: {
        module: string;
        export?: string;
        out: string;
        title: string;
        docVersion: string;
        routes?: string;
        source: string;
        target: string;
      }) => {
        if (options.target !== 'draft-2020-12' && options.target !== 'draft-07') {
          throw new ConfigError('--target', `expected draft-2020-12 or draft-07 (got ${options.target})`);
        }
        const contracts = await loadContracts(options.module, options.export);
        const routes = options.routes === undefined ? undefined : parseRoutes(options.routes, '--routes');
        const schemas = jsonSchemas(contracts, options.target as JsonSchemaTarget);
        const document = asyncApiDocument(contracts, {
          title: options.title,
          version: options.docVersion,
          source: options.source,
          ...(routes ? { routes } : {}),
        });
        await mkdir(path.join(options.out, 'schemas'), { recursive: true });
        // Event types are free text: a file name of their safe characters only, never a path.
        const names = new Map<string, string>();
        for (const id of Object.keys(schemas)) {
          const name = id.replace(/[^A-Za-z0-9._-]/g, '_');
          const clash = names.get(name);
          if (clash !== undefined) {
            throw new ConfigError(
              '--module',
              `event types ${clash} and ${id} would both be written to ${name}.json`,
            );
          }
          names.set(name, id);
        }
        for (const [name, id] of names) {
          const schema = schemas[id];
          const file = path.join(options.out, 'schemas', `${name}.json`);
          await writeFile(file, `${JSON.stringify(schema, null, 2)}\n`);
          print(file);
        }
        const file = path.join(options.out, 'asyncapi.json');
        await writeFile(file, `${JSON.stringify(document, null, 2)}\n`);
        print(file);
      },
    );
}
