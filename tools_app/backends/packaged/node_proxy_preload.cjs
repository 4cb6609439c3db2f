// Preloaded (NODE_OPTIONS=--require) into Node servers whose sandbox has allowed hosts: Node's
// built-in fetch ignores HTTP(S)_PROXY before Node 24, so undici's EnvHttpProxyAgent becomes the
// global dispatcher it uses. See tools_app/backends/packaged/node_proxy.py.
"use strict";
try {
  const { EnvHttpProxyAgent, setGlobalDispatcher } = require("/run/toolbay/node-proxy/undici");
  setGlobalDispatcher(new EnvHttpProxyAgent());
} catch (error) {
  process.stderr.write(`toolbay: fetch cannot use the sandbox's proxy: ${error}\n`);
}
