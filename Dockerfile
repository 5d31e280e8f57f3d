# syntax=docker/dockerfile:1
#
# The bot as an image. `docker compose up` (compose.yaml) builds and runs it; alone:
#
#   docker build -t hugginggpt-bot .                                # remote inference
#   docker build --build-arg LOCAL=1 -t hugginggpt-bot:local .      # + local models on the CPU (amd64)
#   docker run --env-file .env -v hugginggpt-data:/data hugginggpt-bot
#
# Every dependency comes from a lock file with its hashes (requirements.txt, or
# requirements-local.txt with LOCAL=1; scripts/lock.sh makes them from
# pyproject.toml), so two builds of one commit install the same files.

ARG PYTHON_VERSION=3.11

# --- build: a virtualenv with the locked dependencies and the bot -------------
FROM python:${PYTHON_VERSION}-slim-bookworm AS build

# 1: also install the `local` extra (torch, transformers, diffusers) for INFERENCE_MODE=local/hybrid
ARG LOCAL=0
# The CPU build of torch (requirements-torch.txt: the version pyproject.toml pins, by
# hash). PyPI's Linux wheel of torch pulls several GB of CUDA libraries; the PyTorch
# CPU index has the same version without them.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

# A virtualenv without pip or setuptools: the image's own pip installs into it
# (PIP_PYTHON), so the runtime holds the locked packages and the bot, nothing else.
RUN python -m venv --without-pip /opt/venv
ENV PIP_PYTHON=/opt/venv/bin/python \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src

COPY requirements.txt requirements-local.txt requirements-torch.txt ./
# torch first (with LOCAL=1), then the lock, both by hash and with --no-deps: nothing
# unlocked comes in (the local lock leaves torch out and holds what torch needs).
RUN set -eux; \
    if [ "$LOCAL" = "1" ]; then \
        pip install --require-hashes --no-deps --index-url "$TORCH_INDEX_URL" \
            -r requirements-torch.txt; \
        lock=requirements-local.txt; \
    else \
        lock=requirements.txt; \
    fi; \
    pip install --require-hashes --no-deps -r "$lock"

COPY pyproject.toml README.md LICENSE ./
COPY bot ./bot
COPY core ./core
COPY adapters ./adapters
COPY migrations ./migrations
RUN pip install --no-deps . && pip check

# --- runtime: the virtualenv, a user without privileges, nothing else ---------
FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime

LABEL org.opencontainers.image.title="hugginggpt-bot" \
      org.opencontainers.image.description="HuggingGPT chat bot for Discord, Slack and the terminal" \
      org.opencontainers.image.licenses="MIT"

RUN groupadd --system --gid 10001 bot \
    && useradd --system --uid 10001 --gid bot --create-home --home-dir /home/bot \
       --shell /usr/sbin/nologin bot \
    && mkdir -p /data \
    && chown bot:bot /data

COPY --from=build /opt/venv /opt/venv

# DATA_DIR: the SQLite database (when DATABASE_URL is unset) and the media files;
# HF_HOME: models downloaded for local inference. Both on the /data volume.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DATA_DIR=/data \
    HF_HOME=/data/huggingface

USER 10001:10001
WORKDIR /home/bot
VOLUME ["/data"]

# SIGTERM (docker stop) lets running requests finish for SHUTDOWN_GRACE seconds and
# hands the rest to the next process through the job table.
STOPSIGNAL SIGTERM
ENTRYPOINT ["hugginggpt-bot"]
CMD ["run"]
