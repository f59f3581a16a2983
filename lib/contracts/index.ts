/**
 * `pg-lambda-outbox/contracts`: one typed definition of each event type,
 * checked when it is written (`enqueue`) and when it is consumed
 * (`handlers`), and published as JSON Schema and AsyncAPI 3. A contract's
 * schema is any Standard Schema validator (zod, valibot, ArkType, ...); this
 * entry point installs none of them.
 */

export {
  type ContractEvent,
  type ContractEventInput,
  type ContractHandler,
  type ContractHandlers,
  ContractViolationError,
  defineEvents,
  type EventContract,
  EventContracts,
  type EventOf,
  type EventSpec,
  isEventContracts,
  type PayloadInput,
  type PayloadOf,
  type ResolvedContract,
  type TypedEventInput,
  VERSION_HEADER,
} from './define.js';
export type { SchemaIssue } from './issues.js';
export {
  type AsyncApiOptions,
  asyncApiDocument,
  type JsonSchemaTarget,
  jsonSchemas,
  payloadJsonSchema,
} from './publish.js';
export { isStandardSchema, type StandardSchemaV1 } from './standard-schema.js';
