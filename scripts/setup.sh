#!/usr/bin/env bash
# Installs every Debian package the build, tests, MSA tools and web page need.
# Idempotent and non-interactive: packages already present are skipped, apt runs only when needed.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git lld
  libopenblas-dev libopenblas-openmp-dev libomp-dev zlib1g-dev
  libhdf5-dev libyaml-cpp-dev libcli11-dev libspdlog-dev nlohmann-json3-dev libcpp-httplib-dev
  libsqlite3-dev chromium
  libopenmpi-dev openmpi-bin
  librdkit-dev libboost-dev
  googletest libgtest-dev libgmock-dev
  hmmer hhsuite kalign mmseqs2
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} packages present"
fi

# Node.js/npm (web page build) are installed from Debian only when absent: a machine may carry a
# newer Node from elsewhere, which Debian's npm package would conflict with.
if ! command -v npm >/dev/null; then
  ${SUDO:-} apt-get install -y -qq --no-install-recommends nodejs npm
fi

# The page of `serve`: 3Dmol.js (copied into build/web/ by the build) and puppeteer-core (the
# browser test), exactly the versions in web/package-lock.json. Skipped when node_modules was
# installed after the lock file last changed (npm writes node_modules/.package-lock.json).
WEB="$(cd "$(dirname "$0")/.." && pwd)/web"
if [ ! -f "$WEB/node_modules/.package-lock.json" ] || [ "$WEB/package-lock.json" -nt "$WEB/node_modules/.package-lock.json" ]; then
  echo "setup: npm ci in web/"
  (cd "$WEB" && npm ci --no-audit --no-fund)
fi

if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "setup: note: no CUDA toolkit found; the CUDA backend will not be built"
fi
