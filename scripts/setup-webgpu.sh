#!/usr/bin/env bash
# Installs what the WebGPU tests need on a fresh Debian 12 machine without a GPU (run as root):
#   - a software Vulkan driver for Dawn (the `webgpu` npm package):
#       lavapipe from bookworm-backports (Mesa 25; fast, has shader-f16), unpacked into
#       $FA_VULKAN_DIR (default /opt/fa-vulkan) with an ICD file pointing at it;
#       SwiftShader from Debian's `chromium` package as the fallback;
#   - the Vulkan loader (libvulkan1) and lavapipe's runtime libraries;
#   - Debian's chromium (/usr/bin/chromium) for the headless-browser test.
# Idempotent: a second run does nothing but print where things are. Writes
# $FA_VULKAN_DIR/env.sh, which exports VK_ICD_FILENAMES (source it before running tests);
# the vitest configs of packages/webgpu and packages/autograd also find it by themselves
# (scripts/vulkan-driver.mjs).
#
# Debian 12's own Mesa 22 lavapipe does NOT work with Dawn, so it is never installed.
set -euo pipefail

dir=${FA_VULKAN_DIR:-/opt/fa-vulkan}
log() { echo "setup-webgpu: $*"; }

if [ "$(id -u)" != 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive

# Packages from the distribution itself: the loader, lavapipe's shared libraries, chromium.
main_pkgs=(libvulkan1 libllvm15 libdrm2 libelf1 libexpat1 libwayland-client0 libx11-xcb1 libxcb1
  libxcb-dri3-0 libxcb-present0 libxcb-randr0 libxcb-shm0 libxcb-sync1 libxcb-xfixes0
  libxshmfence1 libzstd1 zlib1g chromium)
missing=()
for p in "${main_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# lavapipe from bookworm-backports, fetched without touching the system's apt sources: a private
# sources file derived from /etc/apt/sources.list.d/debian.sources (same mirror, Suites changed).
lvp_so="$dir/lib/libvulkan_lvp.so"
lvp_icd="$dir/lvp_icd.json"
if [ ! -f "$lvp_so" ] || [ ! -f "$lvp_icd" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial" "$work/dl"
  src=/etc/apt/sources.list.d/debian.sources
  if [ -f "$src" ]; then
    # Keep the stanzas whose URIs end in /debian (not -security), rewrite their Suites line.
    awk 'BEGIN { RS = ""; ORS = "\n\n" } $0 ~ /URIs:[^\n]*\/debian\/?(\n|$)/ { print }' "$src" |
      sed -E 's/^Suites:.*/Suites: bookworm-backports/' > "$work/parts/backports.sources"
  fi
  if [ ! -s "$work/parts/backports.sources" ]; then
    mirror=$(grep -hoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list 2>/dev/null | head -1 | tr -d ' ' || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$mirror" > "$work/parts/backports.sources"
  fi
  apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/parts"
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
  ok=0
  if apt-get "${apt_opts[@]}" update -qq >/dev/null 2>&1 &&
     (cd "$work/dl" && apt-get "${apt_opts[@]}" download mesa-vulkan-drivers/bookworm-backports >/dev/null 2>&1); then
    deb=$(ls "$work"/dl/mesa-vulkan-drivers_*.deb 2>/dev/null | head -1 || true)
    if [ -n "$deb" ]; then
      dpkg -x "$deb" "$work/x"
      so=$(find "$work/x" -name libvulkan_lvp.so | head -1)
      if [ -n "$so" ]; then
        $SUDO mkdir -p "$dir/lib"
        $SUDO cp "$so" "$lvp_so"
        printf '{\n  "file_format_version": "1.0.0",\n  "ICD": { "library_path": "%s", "api_version": "1.4.305" }\n}\n' "$lvp_so" | $SUDO tee "$lvp_icd" >/dev/null
        basename "$deb" | $SUDO tee "$dir/lavapipe.version" >/dev/null
        ok=1
        log "lavapipe installed from $(basename "$deb") into $dir"
      fi
    fi
  fi
  [ "$ok" = 1 ] || log "could not fetch lavapipe from bookworm-backports; falling back to SwiftShader"
  rm -rf "$work"
  trap - EXIT
fi

# Choose the driver: lavapipe when its libraries resolve, else chromium's SwiftShader.
icd=
if [ -f "$lvp_icd" ] && ! ldd "$lvp_so" 2>/dev/null | grep -q 'not found'; then
  icd=$lvp_icd
elif [ -f /usr/lib/chromium/vk_swiftshader_icd.json ]; then
  icd=/usr/lib/chromium/vk_swiftshader_icd.json
fi
if [ -z "$icd" ]; then
  log "no software Vulkan driver could be installed" >&2
  exit 1
fi
$SUDO mkdir -p "$dir"
{
  echo "# Written by scripts/setup-webgpu.sh: the software Vulkan driver for Dawn (webgpu in Node)."
  echo "export VK_ICD_FILENAMES=$icd"
  echo "export FA_VULKAN_ICD=$icd"
  echo "export FA_CHROMIUM=${FA_CHROMIUM:-/usr/bin/chromium}"
} | $SUDO tee "$dir/env.sh" >/dev/null
log "Vulkan ICD $icd; chromium $(command -v chromium || echo missing); env file $dir/env.sh"
