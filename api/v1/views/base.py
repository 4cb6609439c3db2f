"""What every v1 viewset shares: the caller's scope, the role each action needs, and a 404
for path ids no object can have."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from django.db.models import Model
from rest_framework import viewsets
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request

from api.permissions import RolePermission
from tenants.scope import Role, TenantScope, tenant_scope


class ScopedViewSet(viewsets.GenericViewSet):
    """``action_roles`` maps actions to the role they need (see ``RolePermission``); the
    others are reads. ``tenant_id_attr`` names the attribute holding the id of the tenant
    whose members see an object (``object_tenant_id``)."""

    permission_classes = [IsAuthenticated, RolePermission]
    action_roles: ClassVar[Mapping[str, str]] = {}
    tenant_id_attr = "tenant_id"

    @property
    def scope(self) -> TenantScope:
        return tenant_scope(self.request)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # No object's id or slug holds a NUL, and PostgreSQL refuses to even look one up.
        if any("\x00" in str(value) for value in kwargs.values()):
            raise NotFound()

    def required_role(self) -> str | None:
        return self.action_roles.get(self.action or "")

    def object_tenant_id(self, obj: Model) -> int | None:
        tenant_id: int | None = getattr(obj, self.tenant_id_attr)
        return tenant_id


WRITE_ROLES = {
    "create": Role.ADMIN,
    "update": Role.ADMIN,
    "partial_update": Role.ADMIN,
    "destroy": Role.ADMIN,
}
