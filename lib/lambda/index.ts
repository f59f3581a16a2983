/**
 * `pg-lambda-outbox/lambda`: helpers for your own Lambda functions, read once
 * at cold start: the database connection from the environment (a Secrets
 * Manager secret, RDS IAM auth or a URL; TLS) and one environment variable
 * through a zod schema, failing with a message that names the variable.
 */

export { type Env, readVar, schemaVar } from '../config/env.js';
export { largePayloadVars } from '../config/relay-config.js';
export { databaseConfig, type SslMode } from '../db/connection-config.js';
