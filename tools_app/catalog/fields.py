"""A JSON field that keeps what was written, key order included.

PostgreSQL's jsonb re-orders object keys, so a tool's schema would come back with
``required`` before ``properties`` and properties shuffled, and clients that draw forms in
property order would show them scrambled. Schemas are stored as JSON text instead, exactly
as written; to Python, forms, DRF and the OpenAPI generator it is still a JSONField (no
JSON lookups are done on these columns).
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper


class VerbatimJSONField(models.JSONField):
    def db_type(self, connection: BaseDatabaseWrapper) -> str:
        return "text"

    def get_db_prep_value(self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False) -> Any:
        if value is None:
            return None
        if not prepared:
            value = self.get_prep_value(value)
        return json.dumps(value, cls=self.encoder, ensure_ascii=False, allow_nan=False)
