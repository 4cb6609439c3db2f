"""Imports: whole catalogs made from a description of an API (OpenAPI today), written through
the catalog's ``catalog_entry_*`` services like every other entry."""
