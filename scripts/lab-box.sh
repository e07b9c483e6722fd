#!/usr/bin/env bash
# A local container "lab box": systemd as PID 1 from the lab image, the mocked nvidia-smi
# (a test double, tests/doubles/) as /usr/bin/nvidia-smi with a chosen card profile, and the
# wheelhouses and the tiny model mounted read-only, as an air-gapped GPU box would have them, and
# the lab's offline apt repository (scripts/apt-pool.sh) at /srv/apt/lab as the box's only apt
# source (the stand-in for a box whose apt works; molecule/resources/prepare.yml does the same).
#   [LAB_NETWORK=net] scripts/lab-box.sh up NAME [GPU_PROFILE]   (rtx3090x2 | rtx3090x1 | h200; default
#                                              rtx3090x2; on the internal network net, else none)
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
    bash "$REPO_ROOT/scripts/apt-pool.sh" >/dev/null
    mkdir -p "$WHEELHOUSE_CPU" "$WHEELHOUSE_DOUBLE" "$TINY_MODEL" "$APT_POOL"
    # A box made before the apt pool was mounted cannot get the role's OS packages: make it anew.
    if podman container exists "$name" &&
       ! podman inspect -f '{{range .Mounts}}{{.Destination}} {{end}}' "$name" | grep -qw /srv/apt/lab; then
      echo "$name has no /srv/apt/lab mount (made by an older lab-box.sh): recreating it"
      podman rm -f -t 5 "$name" >/dev/null
    fi
    if ! podman container exists "$name"; then
      # LAB_NETWORK=<name>: on that internal network (made if missing; the boxes reach each other, nothing else).
      if [ -n "${LAB_NETWORK:-}" ] && ! podman network exists "$LAB_NETWORK"; then
        podman network create --internal "$LAB_NETWORK" >/dev/null
      fi
      mkdir -p "$WHEELHOUSE_ROUTER"
      podman run -d --name "$name" --hostname "$name" --systemd=always --network "${LAB_NETWORK:-none}" \
        --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 \
        -v "$WHEELHOUSE_CPU:/srv/wheelhouse/cpu:ro" -v "$WHEELHOUSE_DOUBLE:/srv/wheelhouse/double:ro" \
        -v "$WHEELHOUSE_ROUTER:/srv/wheelhouse/router:ro" \
        ${WHEELHOUSE_CUDA:+-v "$WHEELHOUSE_CUDA:/srv/wheelhouse/cuda:ro"} \
        -v "$TINY_MODEL:/srv/models/tiny-qwen3:ro" -v "$APT_POOL:/srv/apt/lab:ro" \
        "$LAB_IMAGE" /sbin/init >/dev/null
    fi
    podman start "$name" >/dev/null
    for _ in $(seq 1 50); do
      s=$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)
      case $s in running|degraded) break ;; esac
      sleep 0.2
    done
    podman cp "$REPO_ROOT/tests/doubles/nvidia_smi_mock.py" "$name:/usr/bin/nvidia-smi"
    podman exec "$name" chmod 0755 /usr/bin/nvidia-smi
    # The mock's state (the cards' limits) survives a second `up`, as a real box's cards keep theirs
    # while the driver stays loaded: made anew only for a new box or another GPU profile.
    podman exec "$name" python3 -c 'import json, subprocess, sys
try:
    same = json.load(open("/etc/nvidia-smi-mock/state.json")).get("profile") == sys.argv[1]
except (OSError, ValueError):
    same = False
sys.exit(0 if same else subprocess.call(["/usr/bin/nvidia-smi", "--mock-init", sys.argv[1]], stdout=subprocess.DEVNULL))' "$profile"
    # The box has no network: its apt reads the local pool only (the image's mirror entry is
    # unreachable from here and is set aside).
    podman exec "$name" sh -c 'test -f /srv/apt/lab/Packages || exit 0
      test ! -f /etc/apt/sources.list || mv /etc/apt/sources.list /etc/apt/sources.list.lab-unreachable
      echo "deb [trusted=yes] file:/srv/apt/lab ./" >/etc/apt/sources.list.d/gpuhost-lab.list'
    echo "$name up ($profile)"
    ;;
  down) podman rm -f -t 5 "$name" >/dev/null 2>&1 || true; echo "$name removed" ;;
  inventory) echo "$name ansible_connection=lab_podman ansible_host=$name ansible_python_interpreter=/usr/bin/python3" ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
