"""OAuth 2.1 for the tenants' MCP endpoints.

``oauth.resource``: each tenant's endpoint as a resource server (Protected Resource
Metadata, token checks against the issuers the tenant trusts). ``oauth.server``: the
embedded authorization server (RFC 8414 metadata, authorization code + PKCE, refresh
tokens, client registration by metadata document or RFC 7591, consent). The protocol
work (PKCE, grants, token responses, JOSE) is Authlib's and joserfc's.
"""
