"""Role checks for API views; which objects exist for a caller is the querysets' business."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from tenants.scope import tenant_scope

# The role a view asks for when only platform admins may do something.
PLATFORM = "platform"


class RolePermission(BasePermission):
    """The view's ``required_role()`` for the current action: None for reads (anyone who can
    see the object), a membership role, or ``PLATFORM``.

    Before the object is known a caller needs that role somewhere; on an object, in the
    object's tenant (``view.object_tenant_id(obj)``).
    """

    message = "Your role does not allow this."

    def has_permission(self, request: Request, view: Any) -> bool:
        minimum = view.required_role()
        if minimum is None or (view.lookup_url_kwarg or view.lookup_field) in view.kwargs:
            # On one object: the object check decides, after another tenant's object has
            # answered 404 like a missing one.
            return True
        scope = tenant_scope(request)
        if scope.platform:
            return True
        return minimum != PLATFORM and bool(scope.tenant_ids(minimum))

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        minimum = view.required_role()
        if minimum is None:
            return True
        scope = tenant_scope(request)
        if minimum == PLATFORM:
            return scope.platform
        return scope.has_role(view.object_tenant_id(obj), minimum)
