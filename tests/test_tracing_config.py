"""Tracing's configuration: only the standard OTEL_* variables, off when unset, loud on what
it cannot do; and when off, the hooks create nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mcp_platform import tracing

OTEL = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in OTEL:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("variables", "exporters"),
    [
        ({}, ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "console, otlp"}, ("console", "otlp")),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ()),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, ()),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, ("otlp",)),
    ],
)
def test_exporters_come_from_the_standard_variables(env, variables, exporters):
    for name, value in variables.items():
        env.setenv(name, value)
    assert tracing.exporters_from_env() == exporters


@pytest.mark.parametrize(
    ("variables", "problem"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "unsupported exporter 'jaeger'"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "'grpc' is not supported"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "'http/json'"),
    ],
)
def test_what_cannot_be_exported_refuses_to_start(env, variables, problem):
    for name, value in variables.items():
        env.setenv(name, value)
    with pytest.raises(tracing.TracingConfigError, match=problem):
        tracing.exporters_from_env()


def test_a_process_with_a_bad_variable_does_not_start():
    env = {"DJANGO_SETTINGS_MODULE": "mcp_platform.settings", "OTEL_TRACES_EXPORTER": "zipkin", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode != 0 and "ImproperlyConfigured" in done.stderr and "zipkin" in done.stderr


def test_off_the_hooks_create_nothing():
    assert not tracing.ENABLED  # the test process sets no OTEL_* variable
    with tracing.span("toolbay.backend python") as span:
        assert span is None
        assert tracing.current_ids() == ("", "")
    carrier: dict[str, str] = {}
    assert tracing.inject(carrier) == {} and tracing.traceparent() == ""
    assert tracing.extract({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}) is None
