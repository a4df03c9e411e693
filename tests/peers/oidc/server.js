// Test-only OpenID Provider (node-oidc-provider 9.x, ESM-only) for the gateway's tests.
//
// Run:  npm ci --prefix tests/peers/oidc && PORT=9000 node tests/peers/oidc/server.js
// Prints exactly one line "READY <issuer>" on stdout once it listens.
//
// Environment (all optional):
//   PORT                       listening port (default 9000)
//   HOST                       listening address (default 127.0.0.1; loopback only, please)
//   ISSUER                     issuer URL (default http://HOST:PORT)
//   CLIENT_ID                  the one registered client (default gateway)
//   CLIENT_SECRET              its secret (default secret)
//   REDIRECT_URIS              comma-separated redirect URIs (default http://127.0.0.1/oauth2/callback)
//   POST_LOGOUT_REDIRECT_URIS  comma-separated post-logout redirect URIs
//                              (default: the origin + "/" of every redirect URI)
//   TOKEN_AUTH_METHOD          client_secret_basic (default) or client_secret_post, ...
//   COOKIE_PREFIX              prefix of the provider's cookie names (default: none): a
//                              second instance on 127.0.0.1 (cookies ignore the port)
//                              must not read the first one's session and interaction
//   BACKCHANNEL_LOGOUT_URI     the client's backchannel_logout_uri (Back-Channel Logout 1.0,
//                              with backchannel_logout_session_required: ID tokens carry
//                              sid, and ending a session at /session/end posts a logout
//                              token there; each post is logged "BACKCHANNEL ok" or "BACKCHANNEL error ...")
//
// Dev interactions: any login + any password is accepted; the login string becomes `sub`.
//   email  = login if it contains '@', else `${login}@example.test`
//   groups = from the GROUPS table below, else ['users'];
//            a login of the form "name@dom#g1,g2" yields groups ['g1', 'g2'].
//   email_verified = true; a login ending "!unverified" gives false, "!noverified" none
'use strict';

function csv(value, fallback) {
  return (value === undefined || value === '' ? fallback : value)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

const PORT = Number(process.env.PORT || 9000);
const HOST = process.env.HOST || '127.0.0.1';
const HOST_IN_URL = HOST.includes(':') ? `[${HOST}]` : HOST;
const ISSUER = process.env.ISSUER || `http://${HOST_IN_URL}:${PORT}`;
const CLIENT_ID = process.env.CLIENT_ID || 'gateway';
const CLIENT_SECRET = process.env.CLIENT_SECRET || 'secret';
const REDIRECT_URIS = csv(process.env.REDIRECT_URIS, 'http://127.0.0.1/oauth2/callback');
const POST_LOGOUT_REDIRECT_URIS = csv(
  process.env.POST_LOGOUT_REDIRECT_URIS,
  [...new Set(REDIRECT_URIS.map((u) => `${new URL(u).origin}/`))].join(','),
);
const TOKEN_AUTH_METHOD = process.env.TOKEN_AUTH_METHOD || 'client_secret_basic';
const COOKIE_PREFIX = process.env.COOKIE_PREFIX || '';
const BACKCHANNEL_LOGOUT_URI = process.env.BACKCHANNEL_LOGOUT_URI || '';

const GROUPS = {
  'alice@example.test': ['admins', 'engineering'],
  'bob@example.test': ['engineering'],
};

function accountClaims(id) {
  // "!unverified" / "!noverified" at the end: email_verified false / left out (the
  // e-mail claim cases of issue 28); the sub stays the whole login.
  const marker = id.match(/!(unverified|noverified)$/);
  const login = marker ? id.slice(0, -marker[0].length) : id;
  const [base, groupSpec] = login.split('#', 2);
  const email = base.includes('@') ? base : `${base}@example.test`;
  const groups = groupSpec !== undefined
    ? groupSpec.split(',').filter(Boolean)
    : (GROUPS[email] || ['users']);
  const claims = { sub: id, email, email_verified: !marker, groups };
  if (marker && marker[1] === 'noverified') delete claims.email_verified;
  return claims;
}

(async () => {
  const { default: Provider } = await import('oidc-provider'); // ESM package, dynamic import from CJS

  const configuration = {
    clients: [{
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      redirect_uris: REDIRECT_URIS,
      post_logout_redirect_uris: POST_LOGOUT_REDIRECT_URIS,
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: TOKEN_AUTH_METHOD,
      // (docs/how-to/backchannel-logout.md shows the lines between these two markers)
      // backchannel-logout client: begin
      ...(BACKCHANNEL_LOGOUT_URI ? {
        backchannel_logout_uri: BACKCHANNEL_LOGOUT_URI,
        backchannel_logout_session_required: true,
      } : {}),
      // backchannel-logout client: end
    }],
    // scope -> claims it releases
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      groups: ['groups'],
    },
    scopes: ['openid', 'offline_access', 'email', 'groups'],
    // false: claims of granted scopes are put into the ID token too (not only /me)
    conformIdTokenClaims: false,
    features: {
      devInteractions: { enabled: true }, // built-in login + consent pages
      introspection: { enabled: true },
      revocation: { enabled: true },
      rpInitiatedLogout: { enabled: true }, // end_session_endpoint (/session/end)
      backchannelLogout: { enabled: true }, // logout tokens to backchannel_logout_uri
    },
    cookies: {
      keys: ['dev-only-cookie-signing-key'],
      names: {
        session: `${COOKIE_PREFIX}_session`,
        interaction: `${COOKIE_PREFIX}_interaction`,
        resume: `${COOKIE_PREFIX}_interaction_resume`,
      },
    },
    // Its outgoing requests (the back-channel logout posts) refuse special-use addresses
    // (an SSRF guard, through the dispatcher it hands fetch); the tests run every peer
    // on loopback, so this test-only provider posts there without it.
    fetch(url, options) {
      const { dispatcher, ...rest } = options; // eslint-disable-line no-unused-vars
      return fetch(url, rest);
    },
    async findAccount(ctx, id) {
      return {
        accountId: id,
        async claims() { return accountClaims(id); },
      };
    },
    ttl: {
      AccessToken: Number(process.env.ACCESS_TOKEN_TTL || 3600),
      AuthorizationCode: 60,
      IdToken: 3600,
      RefreshToken: 86400,
      Interaction: 3600,
      Session: 86400,
      Grant: 86400,
    },
  };

  // ROTATE_REFRESH_TOKENS=1: every refresh rotates the refresh token, so a used one given
  // again is refused (invalid_grant) and its grant revoked (reuse detection); each
  // refresh granted is logged as a "REFRESH GRANTED" line, for tests to count.
  const ROTATE_REFRESH_TOKENS = process.env.ROTATE_REFRESH_TOKENS === '1';
  if (ROTATE_REFRESH_TOKENS) configuration.rotateRefreshToken = () => true;

  const oidc = new Provider(ISSUER, configuration);
  if (ROTATE_REFRESH_TOKENS) {
    oidc.on('grant.success', (ctx) => {
      if (ctx.oidc.params.grant_type === 'refresh_token') console.error('REFRESH GRANTED');
    });
  }
  oidc.on('server_error', (ctx, err) => console.error('server_error', err));
  oidc.on('authorization.error', (ctx, err) => console.error('authorization.error', err.message, err.error_description || ''));
  oidc.on('grant.error', (ctx, err) => console.error('grant.error', err.message, err.error_description || ''));
  oidc.on('backchannel.success', () => console.error('BACKCHANNEL ok'));
  oidc.on('backchannel.error', (ctx, err) => console.error('BACKCHANNEL error', err.message));
  oidc.on('end_session.error', (ctx, err) => console.error('end_session.error', err.message, err.error_description || ''));

  const server = oidc.listen(PORT, HOST, () => {
    console.error(`oidc-provider listening on http://${HOST_IN_URL}:${PORT}, client ${CLIENT_ID}, `
      + `redirect_uris ${REDIRECT_URIS.join(' ')}, token auth ${TOKEN_AUTH_METHOD}`);
    process.stdout.write(`READY ${ISSUER}\n`);
  });
  server.on('error', (err) => { console.error('listen error', err); process.exit(1); });

  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    server.close(() => process.exit(0));
    server.closeAllConnections();
    setTimeout(() => process.exit(0), 2000).unref(); // bounded shutdown
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
})().catch((err) => { console.error(err); process.exit(1); });
