#!/usr/bin/env bash
# A local container "lab box": systemd as PID 1 from the lab image, the mocked nvidia-smi
# (a test double, tests/mock/) as /usr/bin/nvidia-smi with a chosen card profile, and the
# wheelhouses and the tiny model mounted read-only, as an air-gapped GPU box would have them.
#   scripts/lab-box.sh up NAME [GPU_PROFILE]   (rtx3090x2 | rtx3090x1 | h200; default rtx3090x2)
#   scripts/lab-box.sh down NAME
#   scripts/lab-box.sh inventory NAME          (prints an inventory line for it)
set -euo pipefail
# shellcheck source=scripts/lab-env.sh
. "$(dirname "$0")/lab-env.sh"
cmd=${1:?usage: lab-box.sh up|down|inventory NAME [GPU_PROFILE]}
name=${2:?container name}
profile=${3:-rtx3090x2}
case $cmd in
  up)
    bash "$REPO_ROOT/scripts/lab-image.sh" >/dev/null
    mkdir -p "$WHEELHOUSE_CPU" "$WHEELHOUSE_DOUBLE" "$TINY_MODEL"
    if ! podman container exists "$name"; then
      podman run -d --name "$name" --hostname "$name" --systemd=always --network none \
        --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 \
        -v "$WHEELHOUSE_CPU:/srv/wheelhouse/cpu:ro" -v "$WHEELHOUSE_DOUBLE:/srv/wheelhouse/double:ro" \
        -v "$TINY_MODEL:/srv/models/tiny-qwen3:ro" \
        "$LAB_IMAGE" /sbin/init >/dev/null
    fi
    podman start "$name" >/dev/null
    for _ in $(seq 1 50); do
      s=$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)
      case $s in running|degraded) break ;; esac
      sleep 0.2
    done
    podman cp "$REPO_ROOT/tests/mock/nvidia_smi_mock.py" "$name:/usr/bin/nvidia-smi"
    podman exec "$name" chmod 0755 /usr/bin/nvidia-smi
    podman exec "$name" /usr/bin/nvidia-smi --mock-init "$profile" >/dev/null
    echo "$name up ($profile)"
    ;;
  down) podman rm -f -t 5 "$name" >/dev/null 2>&1 || true; echo "$name removed" ;;
  inventory) echo "$name ansible_connection=containers.podman.podman ansible_host=$name ansible_python_interpreter=/usr/bin/python3" ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
