#!/bin/sh
# Builds the image deploy/Dockerfile starts FROM where no image registry can be reached (CI, an
# air-gapped host): a Debian bookworm root filesystem made from Debian packages (debootstrap),
# Python 3.11 with a virtual environment at /python/venv (first on PATH, as in Flower's images)
# holding fedgs' dependencies with CPU torch, and Flower's container user `app` (uid 49999),
# imported with `docker import`. Then:
#
#   deploy/local-base-image.sh                     # tag fedgs-local-base:bookworm
#   docker build -f deploy/Dockerfile --build-arg BASE_IMAGE=fedgs-local-base:bookworm \
#     --build-arg TORCH=preinstalled -t fedgs-superexec:1.41.0 .
#
# Needs root (debootstrap, chroot), a Debian mirror and a Python package index; pip inside the
# chroot reads this host's pip configuration and /opt (its local package files), mounted
# read-only. TORCH_WHEEL names the CPU torch wheel to install (a file or a requirement);
# TORCHVISION the matching torchvision requirement.
set -eu

TAG=${1:-fedgs-local-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
TORCH_WHEEL=${TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}
TORCHVISION=${TORCHVISION:-torchvision==0.28.0}
HERE=$(cd "$(dirname "$0")/.." && pwd)
ROOT=$(mktemp -d /var/tmp/fedgs-base-rootfs.XXXXXX)

cleanup() {
    for mounted in "$ROOT/opt" "$ROOT/proc"; do
        if mountpoint -q "$mounted"; then umount "$mounted"; fi
    done
    if mountpoint -q "$ROOT/opt" || mountpoint -q "$ROOT/proc"; then
        echo "local-base-image: $ROOT still has mounts; not removing it" >&2
        return
    fi
    if [ -n "${KEEP_ROOTFS:-}" ]; then echo "local-base-image: kept $ROOT" >&2; return; fi
    rm -rf "$ROOT"
}
trap cleanup EXIT INT TERM

debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$ROOT" "$MIRROR"

mkdir -p "$ROOT/opt" "$ROOT/etc/xdg"
mount --bind /opt "$ROOT/opt"
mount -o remount,ro,bind "$ROOT/opt"
mount -t proc proc "$ROOT/proc"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# this host's trust store (a package proxy may sign with its own CA), for the build only
cp "$ROOT/etc/ssl/certs/ca-certificates.crt" "$ROOT/tmp/debian-ca-certificates.crt"
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$ROOT/etc/pip.conf"; fi
if [ -d /etc/xdg/pip ]; then cp -r /etc/xdg/pip "$ROOT/etc/xdg/pip"; fi

# fedgs' dependencies except torch/torchvision, which come as CPU builds
python3 - "$HERE/pyproject.toml" > "$ROOT/tmp/requirements.txt" <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
for requirement in project["dependencies"]:
    if not requirement.startswith(("torch==", "torchvision==")):
        print(requirement)
EOF
case "$TORCH_WHEEL" in
    /*) cp "$TORCH_WHEEL" "$ROOT/tmp/"; TORCH_REQ="/tmp/$(basename "$TORCH_WHEEL")" ;;
    *) TORCH_REQ=$TORCH_WHEEL ;;
esac

chroot "$ROOT" /bin/sh -eu <<EOF
python3 -m venv /python/venv
/python/venv/bin/pip install --quiet --upgrade pip "setuptools>=77" wheel
/python/venv/bin/pip install --quiet "$TORCH_REQ" "$TORCHVISION" -r /tmp/requirements.txt
# No CPU build of torchvision lies on this machine; PyPI's is built against CUDA torch, so its C
# ops (nms, roi_align: detection models, which fedgs never uses) do not load, and registering
# their meta kernels fails at import. fedgs uses torchvision's image utilities and models only.
TV=\$(/python/venv/bin/python -c "import importlib.util as u; print(u.find_spec('torchvision').submodule_search_locations[0])")
echo '"""Emptied by fedgs deploy/local-base-image.sh: no C ops to register."""' > "\$TV/_meta_registrations.py"
/python/venv/bin/python -c "import torch, torchvision, flwr; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'flwr', flwr.__version__)"
useradd --uid 49999 --user-group --home-dir /app --create-home --shell /bin/sh app
chown -R app:app /python
mv /tmp/debian-ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
rm -rf /root/.cache /tmp/* /etc/pip.conf /etc/xdg/pip
EOF

umount "$ROOT/opt" "$ROOT/proc"
tar -C "$ROOT" -c . | docker import \
    --change 'ENV PATH=/python/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV PYTHONUNBUFFERED=1' \
    --change 'USER app' \
    --change 'WORKDIR /app' \
    - "$TAG"
echo "local-base-image: built $TAG"
