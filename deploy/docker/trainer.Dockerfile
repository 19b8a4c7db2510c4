# The trainer service (`akka trainer serve`): the API, the controller, SQLite or Postgres, a local
# or S3 blob store, the local or Ray backend's client. No torch: training runs in the worker image
# (deploy/docker/worker.Dockerfile) on the Ray cluster.
#
#   docker build -f deploy/docker/trainer.Dockerfile -t akka-trainer:0.5.0 .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# The service and the Ray job client; every dependency is pinned in pyproject.toml.
RUN python -m venv /opt/akka/venv \
    && /opt/akka/venv/bin/pip install --no-cache-dir --upgrade pip==25.3 \
    && /opt/akka/venv/bin/pip install --no-cache-dir ".[service,ray]"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="akka training service" \
      org.opencontainers.image.version="0.5.0"
COPY --from=build /opt/akka/venv /opt/akka/venv
RUN groupadd --gid 1000 akka \
    && useradd --uid 1000 --gid akka --home-dir /var/lib/akka --create-home --shell /usr/sbin/nologin akka
ENV PATH=/opt/akka/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    AKKA_HOME=/var/lib/akka/trainer
USER 1000:1000
WORKDIR /var/lib/akka
EXPOSE 9001
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9001/healthz', timeout=4)"]
ENTRYPOINT ["akka", "trainer", "serve"]
CMD ["--config", "/etc/akka/settings.yaml", "--host", "0.0.0.0", "--port", "9001"]
