# The training worker and Ray node: torch, TRL, PEFT and Ray, with akka training's job code. It
# is the image of the KubeRay head and GPU workers (deploy/kubernetes/overlays/production), and of
# the embedded single-replica trainer (which runs its jobs as child processes).
#
#   docker build -f deploy/docker/worker.Dockerfile -t akka-worker:0.5.0 .
#   docker build -f deploy/docker/worker.Dockerfile --build-arg CUDA_IMAGE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu22.04 \
#       --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu126 -t akka-worker:0.5.0-cu126 .
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04
FROM ${CUDA_IMAGE}
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
ARG TORCH_VERSION=2.13.0
ENV DEBIAN_FRONTEND=noninteractive
# Python 3.11 from the distribution; its patch level follows the base image's security updates.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# torch first, from the index of the base image's CUDA, so that pip does not pick another build;
# then the training stack, Ray and the service (the embedded trainer), all pinned in pyproject.
RUN python3.11 -m venv /opt/akka/venv \
    && /opt/akka/venv/bin/pip install --no-cache-dir --upgrade pip==25.3 \
    && /opt/akka/venv/bin/pip install --no-cache-dir --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" \
    && /opt/akka/venv/bin/pip install --no-cache-dir ".[service,train,ray]" \
    && rm -rf /src
RUN groupadd --gid 1000 ray \
    && useradd --uid 1000 --gid ray --home-dir /home/ray --create-home --shell /bin/bash ray
ENV PATH=/opt/akka/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    AKKA_MODEL_CACHE=/home/ray/.cache/akka/models
USER 1000:1000
WORKDIR /home/ray
# A Ray node is healthy when its raylet answers the cluster's GCS (RAY_ADDRESS, set by KubeRay).
HEALTHCHECK --interval=30s --timeout=10s --start-period=120s --retries=3 \
    CMD ["sh", "-c", "ray health-check --address \"${RAY_ADDRESS:-127.0.0.1:6379}\" --skip-version-check"]
CMD ["bash"]
