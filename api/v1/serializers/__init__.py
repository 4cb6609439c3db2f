"""Serializers of the v1 API, one module per resource (``fields`` holds the shared ones): they
check the shape of input and call services to write.

Domain rules (schemas, backends, names, owners) live in the services, which raise
Django's ValidationError per field; ``api.exceptions`` answers those like serializer
errors, so every 400 names its fields the same way.
"""
