// The outside OAuth/OIDC provider of the connection tests: panva's oidc-provider (installed by
// tests/staff_auth/install_oidc_provider.sh) with its development sign-in and consent pages.
// Configuration from the JSON file named by argv[2]:
//   {"issuer", "port", "module_dir", "accounts": {"alice": {...claims}}, "clients": [...],
//    "jwks": {"keys": [private JWK]}, "access_token_seconds"}
// Refresh tokens are issued to every client allowed the refresh_token grant (no offline_access
// dance), revocation and introspection are on (the tests check that a disconnect revoked).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const { default: Provider } = await import(
  pathToFileURL(join(config.module_dir, 'node_modules', 'oidc-provider', 'lib', 'index.js')).href
);

const provider = new Provider(config.issuer, {
  clients: config.clients,
  jwks: config.jwks,
  claims: { openid: ['sub'], profile: ['name'], email: ['email'] },
  pkce: { required: () => true },
  ttl: { AccessToken: config.access_token_seconds, RefreshToken: 3600 },
  features: {
    devInteractions: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
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
provider.proxy = false;
const server = provider.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${config.issuer}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
