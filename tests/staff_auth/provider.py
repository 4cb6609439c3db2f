"""The test OpenID Connect provider as the tests see it: its client and a handle on its accounts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joserfc.jwk import RSAKey

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
