import net from 'node:net';

/**
 * How the proxy treats new connections:
 * - `pass`: forward to the upstream;
 * - `refuse`: accept and reset at once (the client sees ECONNRESET), as a
 *   target whose load balancer drops connections;
 * - `blackhole`: accept and never answer, as a network path that drops
 *   packets. Black-holed sockets stay open when the outage ends, as they
 *   would in AWS: only the client's own deadline frees them.
 */
export type ProxyMode = 'pass' | 'refuse' | 'blackhole';

/** Connections the proxy saw, by how it treated them. */
export interface ProxyCounts {
  passed: number;
  refused: number;
  blackholed: number;
}

/**
 * A TCP proxy in front of one AWS endpoint (the relays' EventBridge client
 * points at it), so the suite can take one target down while the others stay
 * up. Local-only chaos machinery.
 */
export class TargetProxy {
  private mode: ProxyMode = 'pass';
  private readonly sockets = new Set<net.Socket>();
  /** Forwarded connections (client side → upstream side), open ones only. */
  private readonly forwarded = new Map<net.Socket, net.Socket>();
  readonly counts: ProxyCounts = { passed: 0, refused: 0, blackholed: 0 };
  private readonly server: net.Server;

  private constructor(
    private readonly upstream: { host: string; port: number },
    readonly port: number,
    server: net.Server,
  ) {
    this.server = server;
  }

  static async start(upstreamUrl: string): Promise<TargetProxy> {
    const url = new URL(upstreamUrl);
    const upstream = { host: url.hostname, port: Number(url.port) };
    let proxy: TargetProxy | undefined;
    const server = net.createServer((socket) => proxy?.accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', resolve);
    });
    proxy = new TargetProxy(upstream, (server.address() as net.AddressInfo).port, server);
    return proxy;
  }

  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /**
   * Switches the mode for new connections and for the SDK's kept-alive ones:
   * `refuse` resets them, `blackhole` stops forwarding on them (a request in
   * flight never gets its answer).
   */
  setMode(mode: ProxyMode): void {
    this.mode = mode;
    if (mode === 'pass') return;
    for (const [client, upstream] of this.forwarded) {
      this.forwarded.delete(client);
      if (mode === 'refuse') {
        upstream.destroy();
        client.resetAndDestroy();
      } else {
        client.unpipe(upstream);
        upstream.unpipe(client);
        upstream.destroy();
        client.on('data', () => {});
      }
    }
  }

  private accept(client: net.Socket): void {
    this.sockets.add(client);
    client.on('close', () => this.sockets.delete(client));
    client.on('error', () => {});
    if (this.mode === 'refuse') {
      this.counts.refused++;
      client.resetAndDestroy();
      return;
    }
    if (this.mode === 'blackhole') {
      this.counts.blackholed++;
      client.on('data', () => {}); // read and drop
      return;
    }
    this.counts.passed++;
    const upstream = net.connect(this.upstream.port, this.upstream.host);
    this.sockets.add(upstream);
    upstream.on('close', () => this.sockets.delete(upstream));
    upstream.on('error', () => client.destroy());
    this.forwarded.set(client, upstream);
    client.on('close', () => {
      this.forwarded.delete(client);
      upstream.destroy();
    });
    upstream.on('close', () => {
      if (this.forwarded.has(client)) client.destroy();
    });
    client.pipe(upstream);
    upstream.pipe(client);
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
