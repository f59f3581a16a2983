/**
 * The parts of zod this package's own modules use. The build bundles this
 * module with zod into dist/zod.js (scripts/build.mjs), so the package
 * installs without zod (6 MB installed, most of it sources and locales no
 * module loads); named exports let the bundle leave out what is not used.
 * The public types never name zod: a service needs it only for its own
 * schemas.
 */

export type { core, infer, input, ZodError, ZodType } from 'zod';
export {
  array,
  boolean,
  coerce,
  custom,
  discriminatedUnion,
  enum,
  guid,
  int,
  iso,
  literal,
  NEVER,
  number,
  object,
  record,
  strictObject,
  string,
  union,
  unknown,
  url,
  uuid,
} from 'zod';
