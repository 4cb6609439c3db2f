"""The tenants' MCP endpoints as OAuth resource servers."""
