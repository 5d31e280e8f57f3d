#!/usr/bin/env sh
# Regenerate the lock files the Docker image installs from, after a change to
# the dependencies in pyproject.toml (tests/test_deploy.py fails until you do):
#
#   .venv/bin/pip install uv && scripts/lock.sh            # keep current pins where possible
#   scripts/lock.sh --upgrade                               # move everything to the newest
#
# requirements.txt        the base dependencies, every file pinned by hash
# requirements-local.txt  the same plus the `local` extra and what torch needs, except
#                         torch itself: the image installs the CPU build of torch first
#                         from the PyTorch index (requirements-torch.txt; PyPI's Linux
#                         wheel pulls the multi-GB CUDA libraries), at the version
#                         pyproject.toml pins.
set -eu
cd "$(dirname "$0")/.."
UV="${UV:-.venv/bin/uv}"
torch_pin=$(grep -o '"torch==[^"]*"' pyproject.toml | tr -d '"')
overrides=scripts/lock-overrides.txt
{
  echo "# Written by scripts/lock.sh from pyproject.toml: a marker that never holds keeps"
  echo "# torch out of requirements-local.txt, at the pinned version."
  echo "$torch_pin ; sys_platform == 'never'"
} >"$overrides"
# torch's own requirements (Requires-Dist of its wheel, without extras): locked, by hash,
# for the image installs torch with --no-deps
torch_needs=scripts/lock-torch-needs.txt
{
  echo "# Written by scripts/lock.sh: what $torch_pin requires (its wheel's Requires-Dist)."
  printf '%s\n' filelock "typing-extensions>=4.10.0" "setuptools>=77.0.3" "sympy>=1.13.3" \
    "networkx>=2.5.1" jinja2 "fsspec>=0.8.5"
} >"$torch_needs"
set -- --universal --python-version 3.11 --generate-hashes --quiet \
  --custom-compile-command "scripts/lock.sh" "$@"
"$UV" pip compile pyproject.toml "$@" -o requirements.txt
"$UV" pip compile pyproject.toml "$torch_needs" --extra local --override "$overrides" "$@" \
  -o requirements-local.txt
