// A real OpenID Connect provider for the staff SSO tests: panva's oidc-provider (the certified
// Node implementation) with its development sign-in pages, started by tests/staff_auth/conftest.py.
// Configuration comes from a JSON file named by argv[2]:
//   {"issuer", "port", "client": {client_id, client_secret, redirect_uris}, "jwks": {"keys": [private JWK]},
//    "accounts_file"}
// Accounts are read from accounts_file at every lookup, so a test changes a user's groups between
// two sign-ins by rewriting the file: {"alice": {"email", "email_verified", "groups": [...]}}.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const { default: Provider } = await import(
  pathToFileURL(join(config.module_dir, 'node_modules', 'oidc-provider', 'lib', 'index.js')).href
);

function account(id) {
  const accounts = JSON.parse(readFileSync(config.accounts_file, 'utf8'));
  return accounts[id];
}

const provider = new Provider(config.issuer, {
  clients: [{ ...config.client, grant_types: ['authorization_code'], response_types: ['code'] }],
  jwks: config.jwks,
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], groups: ['groups'] },
  // Claims asked for by scope go into the ID token too (Entra and Keycloak put groups there).
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, id) {
    const data = account(id);
    if (!data) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...data }; } };
  },
  // No consent screen for the one first-party client (as a company IdP is set up for its apps).
  async loadExistingGrant(ctx) {
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid email profile groups');
    grant.addOIDCClaims(['email', 'email_verified', 'name', 'groups']);
    await grant.save();
    return grant;
  },
});
provider.proxy = false;
const server = provider.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${config.issuer}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
