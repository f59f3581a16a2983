// The Standard Schema interface (https://standardschema.dev), v1, as its
// specification asks libraries to take it: the types copied in, no package
// to install. zod (3.24+, 4), valibot (1.x), ArkType (2.x) and others
// implement it; a schema of any of them is accepted as it is.

/** A validator of any Standard Schema library. */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly '~standard': StandardSchemaV1.Props<Input, Output>;
}

export declare namespace StandardSchemaV1 {
  interface Props<Input = unknown, Output = Input> {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => Result<Output> | Promise<Result<Output>>;
    readonly types?: Types<Input, Output> | undefined;
    /**
     * The Standard JSON Schema extension (zod 4.2+, valibot through
     * `toStandardJsonSchema`, ArkType): the schema as JSON Schema.
     */
    readonly jsonSchema?: JsonSchemaConverter | undefined;
  }
  type Result<Output> = SuccessResult<Output> | FailureResult;
  interface SuccessResult<Output> {
    readonly value: Output;
    readonly issues?: undefined;
  }
  interface FailureResult {
    readonly issues: ReadonlyArray<Issue>;
  }
  interface Issue {
    readonly message: string;
    readonly path?: ReadonlyArray<PropertyKey | PathSegment> | undefined;
  }
  interface PathSegment {
    readonly key: PropertyKey;
  }
  interface Types<Input = unknown, Output = Input> {
    readonly input: Input;
    readonly output: Output;
  }
  interface JsonSchemaConverter {
    readonly input: (options: { target: string }) => Record<string, unknown>;
    readonly output: (options: { target: string }) => Record<string, unknown>;
  }
  type InferInput<Schema extends StandardSchemaV1> = NonNullable<Schema['~standard']['types']>['input'];
  type InferOutput<Schema extends StandardSchemaV1> = NonNullable<Schema['~standard']['types']>['output'];
}

/** True for an object that implements Standard Schema v1. */
export function isStandardSchema(value: unknown): value is StandardSchemaV1 {
  const props = (value as { '~standard'?: { version?: unknown; validate?: unknown } } | null)?.['~standard'];
  return (
    typeof props === 'object' && props !== null && props.version === 1 && typeof props.validate === 'function'
  );
}

/** An issue's path as `a.b[2].c`. */
export function issuePath(issue: StandardSchemaV1.Issue): string {
  let out = '';
  for (const segment of issue.path ?? []) {
    const key =
      typeof segment === 'object' && segment !== null
        ? (segment as StandardSchemaV1.PathSegment).key
        : segment;
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out;
}
