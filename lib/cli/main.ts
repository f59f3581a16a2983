#!/usr/bin/env node
/**
 * The package's `bin`: `npx pg-lambda-outbox <command>` (and `npm run outbox
 * -- <command>` in this repository). `--help` lists the commands.
 */
import { main } from './program.js';

process.exitCode = await main(process.argv);
