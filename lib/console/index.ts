/**
 * The ops console: its pages and JSON API as a web-standard request handler
 * to mount behind your own authentication ({@link createAdminHandler}),
 * and the local, token-protected server the CLI's `console` command starts
 * ({@link startConsole}). See docs/console.md.
 */
export { cookieName, type GuardOptions, withTokenGuard } from './guard.js';
export {
  type AdminAuth,
  type AdminHandler,
  type AdminHandlerOptions,
  createAdminHandler,
} from './handler.js';
export { type ConsoleOptions, type ConsoleServer, startConsole } from './server.js';
