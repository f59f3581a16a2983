import { ConfigError } from '../errors.js';
import { type RouteConfig, RouteTable, type TargetConfig, targetKey } from '../publish/routes.js';
import { type EventContracts, type EventSpec, type ResolvedContract, VERSION_HEADER } from './define.js';

/** JSON Schema dialects the Standard JSON Schema converters are asked for. */
export type JsonSchemaTarget = 'draft-2020-12' | 'draft-07';

const DIALECTS: Record<JsonSchemaTarget, string> = {
  'draft-2020-12': 'https://json-schema.org/draft/2020-12/schema',
  'draft-07': 'http://json-schema.org/draft-07/schema#',
};

/** The JSON Schema of one version's payload. */
export function payloadJsonSchema(
  contract: ResolvedContract,
  version: number,
  target: JsonSchemaTarget = 'draft-2020-12',
): Record<string, unknown> {
  const schema = contract.versions.get(version);
  if (!schema) throw new ConfigError(`events.${contract.type}`, `has no version ${version}`);
  if (version === contract.version && contract.jsonSchema) return contract.jsonSchema;
  const converter = schema['~standard'].jsonSchema;
  if (!converter) {
    throw new ConfigError(
      `events.${contract.type}`,
      `version ${version}: its schema (${schema['~standard'].vendor}) gives no JSON Schema (no ~standard.jsonSchema): pass jsonSchema in the contract, or for valibot wrap the schema in toStandardJsonSchema() from @valibot/to-json-schema`,
    );
  }
  try {
    return { $schema: DIALECTS[target], ...converter.input({ target }) };
  } catch (error) {
    throw new ConfigError(
      `events.${contract.type}`,
      `version ${version}: the schema cannot be written as JSON Schema: ${(error as Error).message}`,
      { cause: error },
    );
  }
}

/** Every accepted version's payload schema, keyed `<event type>.v<version>`. */
export function jsonSchemas<Defs extends Record<string, EventSpec>>(
  contracts: EventContracts<Defs>,
  target: JsonSchemaTarget = 'draft-2020-12',
): Record<string, Record<string, unknown>> {
  const out: Record<string, Record<string, unknown>> = {};
  for (const contract of contracts.list()) {
    for (const version of [...contract.versions.keys()].sort((a, b) => a - b)) {
      out[`${contract.type}.v${version}`] = payloadJsonSchema(contract, version, target);
    }
  }
  return out;
}

/** The envelope every message carries (docs/consumer.md), with this version's payload. */
function envelopeSchema(contract: ResolvedContract, version: number, payload: Record<string, unknown>) {
  const { $schema: _, ...inline } = payload;
  return {
    type: 'object',
    description: contract.description,
    required: ['id', 'type', 'aggregateType', 'aggregateId', 'occurredAt', 'payload', 'headers'],
    properties: {
      id: { type: 'string', format: 'uuid', description: 'The event id: the consumers deduplicate on it.' },
      type: { type: 'string', const: contract.type },
      aggregateType: contract.aggregateType
        ? { type: 'string', const: contract.aggregateType }
        : { type: 'string' },
      aggregateId: { type: 'string' },
      occurredAt: { type: 'string', format: 'date-time' },
      payload: inline,
      headers: {
        type: 'object',
        additionalProperties: { type: 'string' },
        properties: { [VERSION_HEADER]: { type: 'string', const: String(version) } },
      },
      replayId: {
        type: 'string',
        format: 'uuid',
        description: "Only on a replay of an already published event: the replay's id.",
      },
    },
  };
}

export interface AsyncApiOptions {
  title: string;
  /** The document's version (your service's). Default `1.0.0`. */
  version?: string;
  description?: string;
  /** Routes to describe as channels; default `contracts.routes()` (the contracts' own targets). */
  routes?: readonly RouteConfig[];
  /** EventBridge `source` of the relay's events (`OUTBOX_EVENT_SOURCE`). Default `outbox`. */
  source?: string;
}

const idOf = (text: string) => text.replace(/[^a-zA-Z0-9._-]+/g, '-').replace(/^-+|-+$/g, '');

function channelOf(target: TargetConfig): { id: string; address: string; description: string } {
  if (target.type === 'sqs') {
    const name = target.queueUrl.split('/').pop() ?? target.queueUrl;
    return {
      id: idOf(`sqs-${name}`),
      address: target.queueUrl,
      description: `SQS queue ${name}${name.endsWith('.fifo') ? ' (FIFO: message group = aggregate, deduplication id = event id)' : ''}: the relay sends the envelope as the message body.`,
    };
  }
  return {
    id: idOf(`eventbridge-${target.busName}`),
    address: target.busName,
    description: `EventBridge bus ${target.busName}: the relay puts each event with DetailType = its type and the envelope as Detail.`,
  };
}

/**
 * An AsyncAPI 3.0 document of the contracts: a channel per queue and bus the
 * routes name, with the messages of the event types routed there (one per
 * accepted version: the envelope with that version's payload schema; on a
 * bus, the EventBridge event around it), and the relay's send operations.
 * Event types no route matches are listed under a channel `unrouted`.
 */
export function asyncApiDocument<Defs extends Record<string, EventSpec>>(
  contracts: EventContracts<Defs>,
  options: AsyncApiOptions,
): Record<string, unknown> {
  const routes = [...(options.routes ?? contracts.routes())];
  const table = new RouteTable(routes);
  const targets = new Map<string, TargetConfig>();
  for (const route of routes) for (const target of route.targets) targets.set(targetKey(target), target);
  const source = options.source ?? 'outbox';

  const schemas: Record<string, unknown> = {};
  const messages: Record<string, unknown> = {};
  const channels: Record<
    string,
    { address: string | null; description: string; messages: Record<string, unknown> }
  > = {};
  const operations: Record<string, unknown> = {};
  // Two queues of one name (other accounts or regions) are two channels.
  const idsByAddress = new Map<string, string>();
  const uniqueChannel = (c: ReturnType<typeof channelOf>) => {
    let id = idsByAddress.get(c.address);
    if (id === undefined) {
      id = c.id;
      for (let n = 2; [...idsByAddress.values()].includes(id); n++) id = `${c.id}-${n}`;
      idsByAddress.set(c.address, id);
    }
    return { ...c, id };
  };

  for (const contract of contracts.list()) {
    const keys = table.resolve(contract.type) ?? [];
    const places = keys.length > 0 ? keys.map((k) => targets.get(k) as TargetConfig) : [undefined];
    for (const version of [...contract.versions.keys()].sort((a, b) => a - b)) {
      const id = `${contract.type}.v${version}`;
      schemas[id] = envelopeSchema(contract, version, payloadJsonSchema(contract, version, 'draft-07'));
      for (const target of places) {
        const onBus = target?.type === 'eventbridge';
        const messageId = onBus ? `${id}.eventbridge` : id;
        if (onBus && !schemas[messageId]) {
          schemas[messageId] = {
            type: 'object',
            required: ['detail-type', 'source', 'detail'],
            properties: {
              'detail-type': { type: 'string', const: contract.type },
              source: { type: 'string', const: target.source ?? source },
              detail: { $ref: `#/components/schemas/${id}` },
            },
          };
        }
        messages[messageId] ??= {
          name: contract.type,
          title: `${contract.type} (version ${version})`,
          summary: contract.description,
          contentType: 'application/json',
          payload: { $ref: `#/components/schemas/${messageId}` },
        };
        const channel = target
          ? uniqueChannel(channelOf(target))
          : {
              id: 'unrouted',
              address: null,
              description: 'Event types that no route matches: the relay dead-letters them (NoRoute).',
            };
        channels[channel.id] ??= { address: channel.address, description: channel.description, messages: {} };
        (channels[channel.id] as { messages: Record<string, unknown> }).messages[messageId] = {
          $ref: `#/components/messages/${messageId}`,
        };
      }
    }
  }
  for (const [channelId, channel] of Object.entries(channels)) {
    if (channelId === 'unrouted') continue;
    operations[`relay-sends-to-${channelId}`] = {
      action: 'send',
      summary: 'The outbox relay publishes the events committed by producers, at least once.',
      channel: { $ref: `#/channels/${channelId}` },
      messages: Object.keys(channel.messages).map((m) => ({ $ref: `#/channels/${channelId}/messages/${m}` })),
    };
  }
  const document: Record<string, unknown> = {
    asyncapi: '3.0.0',
    info: {
      title: options.title,
      version: options.version ?? '1.0.0',
      ...(options.description ? { description: options.description } : {}),
    },
    defaultContentType: 'application/json',
    channels,
    operations,
    components: { messages, schemas },
  };
  // Drop undefined values (descriptions not given): not JSON.
  return JSON.parse(JSON.stringify(document));
}
