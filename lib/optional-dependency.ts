import { ConfigError } from './errors.js';

/**
 * Loads an optional peer dependency (an AWS SDK client, rds-signer,
 * node-pg-migrate) at the first use of the feature that needs it, so a service
 * that never uses the feature does not have to install the package.
 *
 * The loader is the caller's own `() => import('<package>')` with the name
 * written out: bundlers (esbuild, for the Lambda functions) follow a literal
 * import and include the package; a computed name would leave it behind.
 *
 * A missing package becomes a {@link ConfigError} whose `variable` is the
 * feature (`largePayloads`, `DATABASE_SECRET_ARN`, `migrate()`) and whose
 * message says what to install (`largePayloads: @aws-sdk/client-s3 is not
 * installed: npm i @aws-sdk/client-s3`). Any other load failure, including a package
 * that is installed but broken, propagates unchanged.
 *
 * @example
 * ```ts
 * const { S3Client } = await importOptional('@aws-sdk/client-s3', 'largePayloads', () =>
 *   import('@aws-sdk/client-s3'),
 * );
 * ```
 */
export async function importOptional<T>(
  packageName: string,
  neededFor: string,
  load: () => Promise<T>,
): Promise<T> {
  try {
    return await load();
  } catch (error) {
    if (isMissing(error, packageName)) {
      throw new ConfigError(neededFor, `${packageName} is not installed: npm i ${packageName}`, {
        cause: error,
      });
    }
    throw error;
  }
}

/**
 * {@link importOptional} once: the returned function loads the package at its
 * first call and hands the same module to every later one. For loads on a hot
 * path (a transport's every call): a dynamic `import()` is not free, and in a
 * bundle (esbuild turns it into a `require` wrapped by `__toESM`) it copies
 * the package's whole export list each time. A failed load is not kept: the
 * next call tries again.
 */
export function optionalImportOnce<T>(
  packageName: string,
  neededFor: string,
  load: () => Promise<T>,
): () => Promise<T> {
  let loaded: Promise<T> | undefined;
  return () => {
    if (!loaded) {
      loaded = importOptional(packageName, neededFor, load);
      loaded.catch(() => {
        loaded = undefined;
      });
    }
    return loaded;
  };
}

/**
 * True when `error` says that `packageName` itself cannot be found (not one of
 * its own dependencies, which would be a broken install, not a missing peer).
 */
function isMissing(error: unknown, packageName: string): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return false;
  return error.message.includes(`'${packageName}'`) || error.message.includes(`"${packageName}"`);
}
