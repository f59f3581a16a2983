import type { Command } from 'commander';
import { startConsole } from '../../console/server.js';
import type { OutboxLogger } from '../../observer.js';
import { oneLine } from '../../operations/text-table.js';
import {
  DEFAULT_STATEMENT_TIMEOUT_SECONDS,
  databaseUrl,
  operator,
  print,
  schemaOf,
  wholeNumber,
} from '../shared.js';

interface ConsoleFlags {
  port: number;
  host?: string;
  allowActions?: boolean;
  showPayloads?: boolean;
}

/** Warnings and failures on stderr, one line each, control characters escaped. */
const stderrLogger: OutboxLogger = {
  debug() {},
  info(message, ...extra) {
    process.stderr.write(`${oneLine(`${message} ${JSON.stringify(Object.assign({}, ...extra))}`, 2000)}\n`);
  },
  warn(message) {
    process.stderr.write(`warning: ${oneLine(message, 2000)}\n`);
  },
  error(message, ...extra) {
    process.stderr.write(
      `error: ${oneLine(`${message} ${JSON.stringify(Object.assign({}, ...extra))}`, 2000)}\n`,
    );
  },
};

/**
 * `console`: the ops console on a local port, until Ctrl-C (SIGINT) or
 * SIGTERM. Prints the URL with its one-time token.
 */
export function consoleCommand(cli: Command): void {
  cli
    .command('console')
    .description('serve the ops console (pages and JSON API) on 127.0.0.1, behind a one-time token')
    .option('--port <n>', 'port to listen on (0: any free port)', wholeNumber(0), 0)
    .option(
      '--host <address>',
      'interface to listen on (default 127.0.0.1; any other is reachable from the network)',
    )
    .option('--allow-actions', 'allow redrive, discard and replay (default: read-only)')
    .option('--show-payloads', "show events' payloads (default: hidden; they may hold personal data)")
    .action(async (flags: ConsoleFlags, command: Command) => {
      if (flags.port > 65_535) throw new Error('--port: expected 0 to 65535');
      const seconds =
        command.optsWithGlobals<{ statementTimeout?: number }>().statementTimeout ??
        DEFAULT_STATEMENT_TIMEOUT_SECONDS;
      const server = await startConsole({
        databaseUrl: databaseUrl(),
        schema: schemaOf(command),
        port: flags.port,
        host: flags.host,
        // --host is the explicit choice; the console warns when it is not loopback.
        allowNonLoopback: flags.host !== undefined,
        allowActions: flags.allowActions === true,
        showPayloads: flags.showPayloads === true,
        actor: `console:${operator().replace(/^cli:/, '')}`,
        statementTimeoutMs: Math.min(seconds * 1000, 5_000),
        logger: stderrLogger,
      });
      const mode = [
        flags.allowActions ? 'actions allowed' : 'read-only',
        flags.showPayloads ? 'payloads shown' : 'payloads hidden',
      ].join(', ');
      print(`pg-lambda-outbox console (${mode}); open:\n\n  ${server.url}\n\nCtrl-C stops it.`);
      await new Promise<void>((resolve) => {
        const stop = () => {
          process.off('SIGINT', stop);
          process.off('SIGTERM', stop);
          resolve();
        };
        process.on('SIGINT', stop);
        process.on('SIGTERM', stop);
      });
      await server.close();
    });
}
