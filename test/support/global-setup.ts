import type { TestProject } from 'vitest/node';
import { startLocalAws } from '../../scripts/local/aws-emulator.js';
import { startLocalPostgres } from '../../scripts/local/postgres.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A database URL allowed to CREATE DATABASE; each test file makes its own. */
    adminDatabaseUrl: string;
    /** AWS API emulator endpoint (moto, LocalStack, MiniStack...). */
    awsEndpoint: string;
  }
}

/**
 * Once per test run: find or start PostgreSQL and the AWS API emulator, hand
 * their addresses to the test files, stop what we started at the end.
 */
export default async function setup(project: TestProject) {
  const log = (line: string) => process.stderr.write(`[test setup] ${line}\n`);
  const postgres = await startLocalPostgres({ log });
  const aws = await startLocalAws({ log }).catch(async (error) => {
    await postgres.stop();
    throw error;
  });
  log(`PostgreSQL: ${postgres.source}; AWS emulator: ${aws.source} at ${aws.endpoint}`);
  project.provide('adminDatabaseUrl', postgres.adminUrl);
  project.provide('awsEndpoint', aws.endpoint);
  return async () => {
    await aws.stop();
    await postgres.stop();
  };
}
