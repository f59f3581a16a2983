import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * Local machinery: an HTTP proxy on the network path between the deployed
 * functions and the emulator. It forwards every request unchanged and can
 * change two things on the way:
 *
 * - `npm start -- --fail-rate` (the functions reach it for EventBridge
 *   through `AWS_ENDPOINT_URL_EVENTBRIDGE`): in PutEvents responses it
 *   reports a share of the accepted entries as failed, the way a lost
 *   acknowledgement looks to the relay: the event did reach the bus, the
 *   relay retries it, and the consumer skips the second copy as a duplicate.
 *   Too many failures in a row dead-letter the event.
 * - `delayMs` (bench:elastic, with MiniStack fronted by the proxy for every
 *   AWS call, `startStackEmulator({ frontPort })`): each request waits that
 *   long before it is forwarded, a network round trip as a function in AWS
 *   waits for one, without spending the machine's CPU.
 * - `oneAtATime` (tests of measured scale out): requests are forwarded one
 *   after another, each once the one before was answered (and after
 *   `delayMs`): a link every caller shares, whose rate more callers cannot
 *   raise.
 *
 * - `answerNext(...)` (tests): the next requests get these answers instead
 *   of being forwarded, one each: a 503, an error page, no answer at all
 *   (`{ hang: true }`: the connection stays open, silent), or an answer cut
 *   short (`{ cut: true }`: a 200 whose body stops half way, the connection
 *   closed).
 *
 * Nothing in the deployed bundle knows about it.
 */
/** An answer in place of the upstream's (`answerNext`). */
export type FaultAnswer =
  | { status: number; body: string; headers?: Record<string, string> }
  | { hang: true }
  | { cut: true };

export class FaultProxy {
  private upstream: URL | undefined;
  injected = 0;
  /** Requests forwarded so far. */
  forwarded = 0;
  /** Milliseconds each request waits before it is forwarded (0: none). */
  delayMs = 0;
  /** Forward one request at a time, in order of arrival. */
  oneAtATime = false;
  private readonly line: Array<() => void> = [];
  private lineBusy = false;
  /** Also fails every PutEvents entry whose Detail contains one of these. */
  readonly failDetailsContaining = new Set<string>();
  private readonly answers: FaultAnswer[] = [];

  private constructor(
    private readonly server: http.Server,
    private readonly failRate: number,
    private readonly random: () => number,
  ) {}

  static async start(failRate: number, random: () => number = Math.random): Promise<FaultProxy> {
    let proxy: FaultProxy | undefined;
    const server = http.createServer((req, res) => proxy?.handle(req, res));
    proxy = new FaultProxy(server, failRate, random);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', resolve);
    });
    return proxy;
  }

  get endpoint(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** The emulator's address; known only once it runs (it needs ours first). */
  forwardTo(upstream: string): void {
    this.upstream = new URL(upstream);
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** The next requests, one answer each, are answered so and not forwarded (counted as forwarded). */
  answerNext(...answers: FaultAnswer[]): void {
    this.answers.push(...answers);
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse) {
    const answer = this.answers.shift();
    if (answer) {
      this.forwarded++;
      req.resume();
      if ('hang' in answer) return; // closed by stop(), or by the client
      if ('cut' in answer) {
        req.on('end', () => {
          res.writeHead(200, { 'content-type': 'application/x-amz-json-1.1', 'content-length': '200' });
          res.write('{"FailedEntryCount":0,"Entries":[{"EventId":', () => res.socket?.destroy());
        });
        return;
      }
      req.on('end', () =>
        res
          .writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers })
          .end(answer.body),
      );
      return;
    }
    const upstream = this.upstream;
    if (!upstream) {
      res.writeHead(503).end();
      return;
    }
    this.forwarded++;
    if (this.oneAtATime) {
      req.pause();
      this.line.push(() => {
        res.once('close', () => {
          this.lineBusy = false;
          this.nextInLine();
        });
        setTimeout(() => this.forward(req, res, upstream), this.delayMs);
      });
      this.nextInLine();
      return;
    }
    if (this.delayMs > 0) {
      // Paused until then: the body stays in the socket's buffers.
      req.pause();
      setTimeout(() => this.forward(req, res, upstream), this.delayMs);
      return;
    }
    this.forward(req, res, upstream);
  }

  private nextInLine() {
    if (this.lineBusy) return;
    const next = this.line.shift();
    if (!next) return;
    this.lineBusy = true;
    next();
  }

  private forward(req: http.IncomingMessage, res: http.ServerResponse, upstream: URL) {
    const target = String(req.headers['x-amz-target'] ?? '');
    const sent: Buffer[] = [];
    req.on('data', (chunk: Buffer) => sent.push(chunk));
    const forward = http.request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        // Unchanged, Host included: the request's signature covers them.
        headers: req.headers,
      },
      (answer) => {
        const chunks: Buffer[] = [];
        answer.on('data', (chunk: Buffer) => chunks.push(chunk));
        answer.on('end', () => {
          let body: Buffer = Buffer.concat(chunks);
          if (target.endsWith('.PutEvents') && answer.statusCode === 200) {
            body = this.failSome(Buffer.concat(sent), body);
          }
          const headers = { ...answer.headers, 'content-length': String(body.length) };
          delete headers['transfer-encoding'];
          res.writeHead(answer.statusCode ?? 502, headers).end(body);
        });
        answer.on('error', () => res.destroy());
      },
    );
    forward.on('error', () => res.destroy());
    req.pipe(forward);
  }

  private failSome(request: Buffer, body: Buffer): Buffer {
    let parsed: { FailedEntryCount?: number; Entries?: Array<Record<string, unknown>> };
    let details: string[];
    try {
      parsed = JSON.parse(body.toString());
      details = (JSON.parse(request.toString()).Entries ?? []).map(
        (e: { Detail?: string }) => e.Detail ?? '',
      );
    } catch {
      return body;
    }
    const marked = (i: number) => [...this.failDetailsContaining].some((m) => details[i]?.includes(m));
    let failed = parsed.FailedEntryCount ?? 0;
    parsed.Entries = (parsed.Entries ?? []).map((entry, i) => {
      if (!entry.EventId || (!marked(i) && this.random() >= this.failRate)) return entry;
      failed++;
      this.injected++;
      return { ErrorCode: 'InjectedFailure', ErrorMessage: 'injected by npm start --fail-rate' };
    });
    parsed.FailedEntryCount = failed;
    return Buffer.from(JSON.stringify(parsed));
  }
}
