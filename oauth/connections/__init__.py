"""Per-user connections: each user's own grant at an outside OAuth provider, used by tools
that act for them (``{"type": "connection"}`` auth of the HTTP backend)."""
