// The outside OAuth/OIDC provider of the connection tests: panva's oidc-provider (installed by
// tests/staff_auth/install_oidc_provider.sh) with its development sign-in and consent pages.
// Configuration from the JSON file named by argv[2]:
//   {"issuer", "port", "module_dir", "accounts": {"alice": {...claims}}, "clients": [...],
//    "jwks": {"keys": [private JWK]}, "access_token_seconds", "client_credentials_seconds",
//    "api_scopes": [...]}
// Refresh tokens are issued to every client allowed the refresh_token grant (no offline_access
// dance), revocation and introspection are on (the tests check that a disconnect revoked), and
// the client credentials grant (RFC 6749 4.4) for clients allowed it, with the API's scopes
// (an API's machine client; Toolbay's own token to list an upstream's tools).
// GET /_test/grants answers how many tokens each grant type issued, so that the tests can count
// what Toolbay asked for.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const { default: Provider, errors } = await import(
  pathToFileURL(join(config.module_dir, 'node_modules', 'oidc-provider', 'lib', 'index.js')).href
);

const provider = new Provider(config.issuer, {
  clients: config.clients,
  jwks: config.jwks,
  claims: { openid: ['sub'], profile: ['name'], email: ['email'] },
  scopes: ['openid', 'offline_access', ...(config.api_scopes || [])],
  pkce: { required: () => true },
  ttl: {
    AccessToken: config.access_token_seconds,
    ClientCredentials: config.client_credentials_seconds || 600,
    RefreshToken: 3600,
  },
  features: {
    devInteractions: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    clientCredentials: { enabled: true },
  },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  // Every refresh rotates the refresh token; using a spent one again ends the grant (the
  // provider's reuse detection), so two refreshes at once would cost the user the connection.
  rotateRefreshToken: true,
  async findAccount(ctx, id) {
    const data = config.accounts[id];
    if (!data) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...data }; } };
  },
});
// RFC 8693 token exchange, through oidc-provider's own extension point for grant types: the
// subject token must be a live access token of this provider; the new token is the same
// account's, for the requested audience (one of config.exchange_audiences), issued to the
// client that asked.
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
provider.registerGrantType(TOKEN_EXCHANGE, async (ctx) => {
  const { params, client } = ctx.oidc;
  if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
    throw new errors.InvalidRequest('subject_token_type must be an access token');
  }
  const subject = await provider.AccessToken.find(params.subject_token || '');
  if (!subject || subject.isExpired) throw new errors.InvalidGrant('subject token invalid or expired');
  if (!(config.exchange_audiences || []).includes(params.audience)) {
    throw new errors.InvalidTarget('audience not allowed');
  }
  const token = new provider.AccessToken({
    accountId: subject.accountId,
    client,
    grantId: subject.grantId,
    gty: 'token_exchange',
    scope: params.scope || subject.scope,
  });
  token.aud = params.audience;
  const value = await token.save();
  ctx.body = {
    access_token: value,
    issued_token_type: ACCESS_TOKEN_TYPE,
    token_type: 'Bearer',
    expires_in: token.expiration,
    scope: token.scope,
  };
}, ['subject_token', 'subject_token_type', 'requested_token_type', 'audience', 'resource']);
const grants = {};
provider.on('grant.success', (ctx) => {
  const type = ctx.oidc.params.grant_type;
  grants[type] = (grants[type] || 0) + 1;
});
provider.use(async (ctx, next) => {
  if (ctx.path === '/_test/grants') {
    ctx.body = grants;
    return;
  }
  await next();
});
provider.proxy = false;
const server = provider.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${config.issuer}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
