"""A real OpenID Connect provider on loopback (panva's oidc-provider under Node), installed
once into .conf/oidc-provider/ by install_oidc_provider.sh, started once per test module.

The test holds the provider's signing key (it hands the provider its JWKS), so it can also
mint ID tokens the provider could have signed, to check what Toolbay refuses."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc.jwk import RSAKey

from tests.poll import wait_for

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MODULE_DIR = ROOT / ".conf" / "oidc-provider"
CLIENT_ID = "toolbay-staff"
CLIENT_SECRET = "a-client-secret-of-the-test-provider-0123456789"
REDIRECT_URI = "http://testserver/staff/sso/callback/"


@dataclass
class Provider:
    issuer: str
    key: RSAKey
    accounts_file: Path

    def set_accounts(self, accounts: dict[str, dict[str, Any]]) -> None:
        self.accounts_file.write_text(json.dumps(accounts))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    if shutil.which("node") is None:
        pytest.skip("Node.js is not installed: the staff SSO tests need it to run oidc-provider")
    install = subprocess.run([str(HERE / "install_oidc_provider.sh")], capture_output=True, text=True, timeout=300)
    if install.returncode != 0:
        pytest.skip(f"npm could not install oidc-provider into .conf/oidc-provider/: {install.stderr.strip()[-500:]}")
    workdir = tmp_path_factory.mktemp("oidc-provider")
    port = _free_port()
    issuer = f"http://127.0.0.1:{port}"
    key = RSAKey.generate_key(2048, parameters={"kid": "test-provider-key", "alg": "RS256", "use": "sig"})
    provider = Provider(issuer=issuer, key=key, accounts_file=workdir / "accounts.json")
    provider.set_accounts({})
    config = {
        "issuer": issuer,
        "port": port,
        "module_dir": str(MODULE_DIR),
        "accounts_file": str(provider.accounts_file),
        "jwks": {"keys": [key.as_dict(private=True)]},
        "client": {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "redirect_uris": [REDIRECT_URI]},
    }
    (workdir / "config.json").write_text(json.dumps(config))
    log = (workdir / "provider.log").open("w")
    process = subprocess.Popen(
        ["node", str(HERE / "oidc_provider.mjs"), str(workdir / "config.json")], stdout=log, stderr=subprocess.STDOUT
    )

    def discovery_answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"oidc-provider exited: {(workdir / 'provider.log').read_text()}")
        return httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200

    try:
        wait_for(discovery_answers, timeout=20, ignore=(httpx.TransportError,), message="oidc-provider did not start")
        yield provider
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


@pytest.fixture
def sso(oidc_provider: Provider, settings: Any) -> Provider:
    """Toolbay configured to sign staff in at the test provider."""
    settings.TOOLBAY_SSO_ISSUER = oidc_provider.issuer
    settings.TOOLBAY_SSO_CLIENT_ID = CLIENT_ID
    settings.TOOLBAY_SSO_CLIENT_SECRET = CLIENT_SECRET
    settings.TOOLBAY_SSO_ROLE_MAP = {
        "toolbay-admins": "platform-admin",
        "acme-operators": "acme:operator",
        "acme-admins": ["acme:admin"],
        "acme-owners": "acme:owner",
        "globex-viewers": "globex:viewer",
    }
    return oidc_provider
