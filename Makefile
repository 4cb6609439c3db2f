# Toolbay. `make run` serves it on this machine; `make test` is the whole suite (what .ci/run calls).
# The work is in scripts/ and conformance/run.sh, so each target is one plain command.
SHELL := /bin/bash

.DEFAULT_GOAL := help
.PHONY: help run test deploy-check deploy-docker conformance conformance-auth lint bench soak clean distclean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

run: ## Install, migrate, seed the demo, start Redis if needed, serve on :8000 with a Celery worker (Ctrl-C stops all)
	@bash scripts/run.sh

test: ## ruff, mypy, makemigrations --check, pytest (PostgreSQL + Redis db 15) and the conformance suite
	@bash scripts/test.sh

deploy-check: ## The Helm chart rendered and validated (Kubernetes 1.25 and 1.37), hadolint, compose and nginx -t (seconds, no daemon)
	@bash scripts/deploy_check.sh

deploy-docker: ## As root: dockerd, local stand-in base images, the image, compose up --scale web=2, a smoke test, teardown (~1.5 GB)
	@bash scripts/deploy_docker.sh

conformance: ## The MCP conformance suite (0.1.16; 0.2.0-alpha.12 for 2025-11-25 and 2026-07-28) against a throw-away server
	@bash conformance/run.sh

conformance-auth: ## The suite's authorization-server scenarios (0.2.0-alpha.12) against the embedded OAuth server
	@bash conformance/auth.sh

lint: ## ruff check .
	@bash -c 'source scripts/lib.sh && ensure_requirements dev && cd "$$ROOT" && "$$VENV/bin/ruff" check .'

bench: ## A benchmark from bench/: BENCH=echo_bench (default) or background_bench, BENCH_ARGS="--sessions 1 8"
	@bash scripts/bench.sh

soak: ## Every soak/*.py: long fault runs (servers, workers killed; rolling restarts) that print their figures
	@bash scripts/soak.sh

clean: ## Remove caches, var/ (private Redis dirs, conformance database) and conformance results; keeps .venv and db.sqlite3
	rm -rf var conformance-results .pytest_cache .ruff_cache .mypy_cache
	find . -path ./.venv -prune -o -path ./.conf -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean ## clean, and also remove .venv and .conf (Node + the conformance suite); keeps db.sqlite3
	rm -rf .venv .conf
