import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * Local demo machinery for `npm start -- --fail-rate`: an HTTP proxy on the
 * network path between the deployed relay and the emulator's EventBridge
 * (the functions reach it through `AWS_ENDPOINT_URL_EVENTBRIDGE`). It forwards
 * every request unchanged and, in PutEvents responses, reports a share of the
 * accepted entries as failed, the way a lost acknowledgement looks to the
 * relay: the event did reach the bus, the relay retries it, and the consumer
 * skips the second copy as a duplicate. Too many failures in a row
 * dead-letter the event. Nothing in the deployed bundle knows about it.
 */
export class FaultProxy {
  private upstream: URL | undefined;
  injected = 0;
  /** Also fails every PutEvents entry whose Detail contains one of these. */
  readonly failDetailsContaining = new Set<string>();

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

  private handle(req: http.IncomingMessage, res: http.ServerResponse) {
    const upstream = this.upstream;
    if (!upstream) {
      res.writeHead(503).end();
      return;
    }
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
