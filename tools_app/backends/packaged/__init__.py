"""Packaged MCP servers: stdio servers installed from npm or PyPI, run per tenant in a sandbox."""
