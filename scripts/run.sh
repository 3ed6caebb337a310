#!/usr/bin/env bash
# Sets up everything (idempotent) and runs SpecTune's main job on the demo pair:
# the desktop app when a display exists, otherwise the headless `spectune demo`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh" --app  # the test tools come with scripts/test.sh
exec "$root/.venv/bin/spectune" "$@"
