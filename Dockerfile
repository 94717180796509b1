# syntax=docker/dockerfile:1
# The agentrt server image: `agentrt serve` as a non-root user on python slim (docs/deployment.md,
# "Container image and compose"). tests/packaging/test_container.py lints this file.
#
#   docker build -t agentrt:0.1.0 .
#   docker run --rm -p 127.0.0.1:8000:8000 -e AGENTRT_API_KEYS='change-me=alice' agentrt:0.1.0
#
# Without arguments it serves the offline demo agent; give your agents' MODULE:ATTR as the command
# (`docker run ... agentrt:0.1.0 myapp.agents:build_agents`), from a derived image that adds them.

# ---- builder: the wheel, and a virtualenv with it and its extras ------------------------------
FROM python:3.12-slim-bookworm AS builder

# The extras installed into the image (pyproject.toml): the server, the Redis and SQL stores and job
# backends, /metrics and traces, the OpenAI-compatible providers.
ARG AGENTRT_EXTRAS=server,redis,sql,otel,openai

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# What a build needs (.dockerignore keeps the rest of the tree out of the context).
COPY pyproject.toml README.md LICENSE ./
COPY src/ src/

# The wheel is built in an isolated environment (hatchling); the virtualenv gets it with its extras.
# Every dependency installs from a binary wheel (tests/packaging checks it resolves so for this
# Python), so neither stage needs a compiler; the runtime stage gets the virtualenv alone.
RUN pip wheel --no-deps --wheel-dir /dist . \
    && python -m venv /opt/agentrt \
    && /opt/agentrt/bin/pip install --only-binary=:all: "$(ls /dist/agentrt-*.whl)[${AGENTRT_EXTRAS}]"

# ---- runtime: python slim, the virtualenv, a non-root user ------------------------------------
FROM python:3.12-slim-bookworm AS runtime

LABEL org.opencontainers.image.title="agentrt" \
      org.opencontainers.image.description="agentrt serve: agents over HTTP (REST + SSE, OpenAI-compatible, web UI)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/agentrt/agentrt"

# uid/gid 10001, as deploy/k8s runs it; its home holds the default SQLite store when no
# AGENTRT_STATE_URL is set.
RUN groupadd --system --gid 10001 agentrt \
    && useradd --system --uid 10001 --gid agentrt --create-home --home-dir /home/agentrt \
       --shell /usr/sbin/nologin agentrt

COPY --from=builder /opt/agentrt /opt/agentrt

# Configuration is read from the environment (docs/server.md): AGENTRT_HOST and AGENTRT_PORT here;
# AGENTRT_API_KEYS, AGENTRT_STATE_URL, AGENTRT_JOBS_URL, AGENTRT_CONFIG, AGENTRT_OIDC_* at run time.
ENV PATH=/opt/agentrt/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/home/agentrt \
    AGENTRT_HOST=0.0.0.0 \
    AGENTRT_PORT=8000

# The current directory is importable by `agentrt serve`: a derived image copies its agents here.
WORKDIR /app
USER 10001:10001
EXPOSE 8000

# /healthz answers once the server accepts requests (no API key needed); slim images have no curl.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('AGENTRT_PORT', '8000'), timeout=2)"]

ENTRYPOINT ["agentrt", "serve"]
CMD ["agentrt.cli.demo:build_demo_agent"]
