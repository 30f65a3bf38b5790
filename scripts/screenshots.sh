#!/usr/bin/env bash
# Build the documentation site and take screenshots of four pages in a headless browser:
# the home page, a maths page, the API reference and a notebook, with their formulas typeset by
# the KaTeX shipped in docs/assets/katex. No network is used.
#
# Needs: the docs extra (scripts/setup installs it into .venv) and Chromium
# (Debian: apt-get install chromium). Usage: scripts/screenshots.sh [OUT_DIR] (default
# screenshots/); it writes home.png, math-deep.png, api.png and notebook-figure3.png there.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-screenshots}"
python="${PYTHON:-.venv/bin/python}"
browser="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}"
if [ -z "$browser" ]; then
  echo "screenshots.sh: no Chromium found; install it (apt-get install chromium) or set CHROMIUM=/path" >&2
  exit 2
fi
site="$(mktemp -d)"
trap 'rm -rf "$site"' EXIT
"$python" -m mkdocs build --strict --quiet -d "$site/site"
mkdir -p "$out"
shot() {  # page (a folder of the site), file name, window height
  "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --allow-file-access-from-files --virtual-time-budget=8000 --window-size=1280,"$3" \
    --screenshot="$out/$2" "file://$site/site/$1index.html" >/dev/null 2>&1
  echo "wrote $out/$2"
}
shot "" home.png 1400
shot "math/deep/" math-deep.png 1400
shot "api/" api.png 1600
shot "notebooks/figure3/" notebook-figure3.png 1800
