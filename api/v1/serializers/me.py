"""What ``GET /api/v1/me/`` answers: the caller and their memberships."""

from __future__ import annotations

from rest_framework import serializers

from tenants.models import Membership


class MembershipOfCallerSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    is_superuser = serializers.BooleanField(help_text="A platform admin: every tenant and the platform catalog.")
    memberships = MembershipOfCallerSerializer(many=True)
