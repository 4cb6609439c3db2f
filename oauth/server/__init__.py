"""The embedded authorization server (Authlib)."""
