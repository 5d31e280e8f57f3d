#!/usr/bin/env sh
# Regenerate the lock files the Docker image installs from, after a change to
# the dependencies in pyproject.toml (tests/test_deploy.py fails until you do):
#
#   .venv/bin/pip install uv && scripts/lock.sh            # keep current pins where possible
#   scripts/lock.sh --upgrade                               # move everything to the newest
#
# requirements.txt        the base dependencies, every file pinned by hash
# requirements-local.txt  the same plus the `local` extra, except torch and what
#                         only torch needs: the image installs the CPU build of
#                         torch first from the PyTorch index (PyPI's Linux wheel
#                         pulls the multi-GB CUDA libraries), at the version
#                         pyproject.toml pins.
set -eu
cd "$(dirname "$0")/.."
UV="${UV:-.venv/bin/uv}"
torch_pin=$(grep -o '"torch==[^"]*"' pyproject.toml | tr -d '"')
overrides=scripts/lock-overrides.txt
{
  echo "# Written by scripts/lock.sh from pyproject.toml: a marker that never holds keeps"
  echo "# torch (and what only torch needs) out of requirements-local.txt, at the pinned version."
  echo "$torch_pin ; sys_platform == 'never'"
} >"$overrides"
set -- --universal --python-version 3.11 --generate-hashes --quiet \
  --custom-compile-command "scripts/lock.sh" "$@"
"$UV" pip compile pyproject.toml "$@" -o requirements.txt
"$UV" pip compile pyproject.toml --extra local --override "$overrides" "$@" -o requirements-local.txt
