// The official MCP TypeScript SDK's client (@modelcontextprotocol/sdk) with its OAuth
// support, driven by a test one step at a time: one JSON command a line on stdin, one JSON
// answer a line on stdout (the protocol of tests/support/mcp_client_py.py, the Python
// SDK's driver; tests/support/mcp_peers.py runs both).
//
//   node client.mjs --url URL [--callback-port N] [--client-metadata-url URL]
//       [--browser ARGV_JSON] [--client-name NAME]
//
// The authorization step is the SDK's own (auth() in client/auth.js): on a 401 the
// transport discovers the metadata, uses --client-metadata-url as the client id when the
// server supports client ID metadata documents (else registers dynamically), runs PKCE
// and calls redirectToAuthorization, which here runs --browser (the authorization URL
// appended) as a person's browser would open it. The browser ends at this process's
// loopback callback (its port is the first line printed: {"ok": true, "callback_port": N});
// as the SDK's own example client does, the code then goes to
// transport.finishAuth() and the client connects again.
//
// Commands (op): connect, list_tools, call {name, arguments}, list_prompts,
// get_prompt {name, arguments}, list_resources, read_resource {uri}, expire (the stored
// access token is replaced by one the server cannot know, as an expired one: the SDK
// meets a 401 and refreshes), tokens, browser {argv} (the browser command from now on),
// log, close.
import { createServer } from 'node:http';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const { values: args } = parseArgs({
  options: {
    url: { type: 'string' },
    'callback-port': { type: 'string', default: '0' },
    'client-metadata-url': { type: 'string', default: '' },
    browser: { type: 'string', default: '' },
    'client-name': { type: 'string', default: 'TypeScript SDK test client' },
  },
});
let redirectUrl = '';
const log = [];
let callbackParams = null;

// The loopback redirect URI a native client listens on (RFC 8252).
const callbackServer = createServer((req, res) => {
  const url = new URL(req.url, redirectUrl);
  if (url.pathname !== '/callback') {
    res.writeHead(404).end();
    return;
  }
  callbackParams = Object.fromEntries(url.searchParams.entries());
  res.writeHead(200, { 'content-type': 'text/html' });
  res.end('<p>Signed in. You may close this window.</p>');
});
await new Promise((resolve) => callbackServer.listen(Number(args['callback-port']), '127.0.0.1', resolve));
// the first line: where the callback listens (--callback-port 0: the kernel's pick)
const callbackPort = callbackServer.address().port;
redirectUrl = `http://127.0.0.1:${callbackPort}/callback`;
process.stdout.write(`${JSON.stringify({ ok: true, callback_port: callbackPort })}\n`);

function runBrowser(url) {
  const argv = [...JSON.parse(args.browser), url];
  return new Promise((resolve) => {
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.on('close', (code) => resolve({ code, out: out.slice(-2000), err: err.slice(-2000) }));
  });
}

// The SDK's OAuthClientProvider, in memory (a real client keeps it on disk).
const store = { clientInformation: undefined, tokens: undefined, codeVerifier: undefined, state: undefined };
const provider = {
  get redirectUrl() { return redirectUrl; },
  clientMetadataUrl: args['client-metadata-url'] || undefined,
  get clientMetadata() {
    return {
      client_name: args['client-name'],
      redirect_uris: [redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  },
  state() {
    store.state = randomBytes(16).toString('hex');
    return store.state;
  },
  clientInformation() { return store.clientInformation; },
  saveClientInformation(info) { store.clientInformation = info; },
  tokens() { return store.tokens; },
  saveTokens(tokens) { store.tokens = tokens; },
  saveCodeVerifier(verifier) { store.codeVerifier = verifier; },
  codeVerifier() { return store.codeVerifier; },
  invalidateCredentials(scope) {
    log.push({ kind: 'invalidate', scope });
    if (scope === 'all' || scope === 'tokens') store.tokens = undefined;
    if (scope === 'all' || scope === 'client') store.clientInformation = undefined;
    if (scope === 'all' || scope === 'verifier') store.codeVerifier = undefined;
  },
  async redirectToAuthorization(url) {
    callbackParams = null;
    if (!args.browser) {
      log.push({ kind: 'browser', url: String(url), status: null });
      throw new Error('no --browser given: the authorization step cannot run');
    }
    const seen = await runBrowser(String(url));
    log.push({ kind: 'browser', url: String(url), status: seen.code, output: seen.out, stderr: seen.err });
  },
};

async function loggingFetch(input, init) {
  const response = await fetch(input, init);
  const method = (init && init.method) || (input instanceof Request ? input.method : 'GET');
  const headers = new Headers((init && init.headers) || (input instanceof Request ? input.headers : undefined));
  log.push({
    kind: 'http', method, url: String(input instanceof Request ? input.url : input),
    status: response.status, www_authenticate: response.headers.get('www-authenticate'),
    mcp_method: headers.get('mcp-method'),
  });
  return response;
}

let client = null;
let transport = null;

function fresh() {
  transport = new StreamableHTTPClientTransport(new URL(args.url), { authProvider: provider, fetch: loggingFetch });
  client = new Client({ name: 'ts-sdk-test-client', version: '1.0.0' });
}

async function connect() {
  fresh();
  try {
    await client.connect(transport);
  } catch (err) {
    if (!(err instanceof UnauthorizedError)) throw err;
    const params = callbackParams;
    if (!params) throw new Error('the browser never reached the callback');
    if (!params.code) throw new Error(`authorization refused: ${JSON.stringify(params)}`);
    if (params.state !== store.state) throw new Error('state mismatch');
    await transport.finishAuth(params.code);
    fresh();
    await client.connect(transport);
  }
  return { protocol_version: transport.protocolVersion ?? null };
}

async function run(command) {
  switch (command.op) {
    case 'connect': return connect();
    case 'log': return { log };
    case 'tokens': return {
      access_token: store.tokens?.access_token ?? null,
      refresh_token: store.tokens?.refresh_token ?? null,
      client_id: store.clientInformation?.client_id ?? null,
    };
    case 'browser':
      args.browser = JSON.stringify(command.argv);
      return {};
    case 'expire':
      store.tokens = { ...store.tokens, access_token: `expired-${randomBytes(8).toString('hex')}` };
      return {};
    case 'close':
      if (client) await client.close();
      return {};
    default: break;
  }
  if (!client) throw new Error('connect first');
  switch (command.op) {
    case 'list_tools': return { tools: (await client.listTools()).tools.map((t) => t.name) };
    case 'call': {
      const result = await client.callTool({ name: command.name, arguments: command.arguments || {} });
      return { is_error: Boolean(result.isError), text: result.content.filter((c) => 'text' in c).map((c) => c.text) };
    }
    case 'list_prompts': return { prompts: (await client.listPrompts()).prompts.map((p) => p.name) };
    case 'get_prompt': {
      const prompt = await client.getPrompt({ name: command.name, arguments: command.arguments || {} });
      return { messages: prompt.messages.length };
    }
    case 'list_resources': return { resources: (await client.listResources()).resources.map((r) => r.uri) };
    case 'read_resource': {
      const read = await client.readResource({ uri: command.uri });
      return { contents: read.contents.map((c) => c.text ?? null) };
    }
    default: throw new Error(`unknown op ${command.op}`);
  }
}

function describe(err) {
  const code = typeof err?.code === 'number' ? err.code : null;
  return { type: err?.constructor?.name ?? 'Error', code, message: String(err?.message ?? err).slice(0, 2000) };
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  let answer;
  try {
    answer = { ok: true, ...(await run(command)) };
  } catch (err) {
    answer = { ok: false, error: describe(err) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
  if (command.op === 'close') break;
}
callbackServer.close();
process.exit(0);
