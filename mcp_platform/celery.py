"""The Celery application; workers start with `celery -A mcp_platform worker`."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_platform.settings")

app = Celery("mcp_platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Task modules live in the apps' parts (tools_app/runs/tasks.py), not at the apps' top level.
app.autodiscover_tasks(["tools_app.runs", "audit"])
