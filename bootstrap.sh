#!/usr/bin/env bash
# One-step set-up for a fresh machine, then the job you ask for:
#   bash bootstrap.sh run    set-up + the main job on the embedded MuJoCo default
#   bash bootstrap.sh test   set-up + ruff + the layering contracts + the whole test suite
# Set-up is idempotent: it reinstalls only when pyproject.toml changed since the last install.
set -euo pipefail
cd "$(dirname "$0")"
root=$(pwd)
venv="$root/.venv"
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3

setup() {
    local stamp="$venv/.installed" want
    want=$(sha256sum pyproject.toml | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return
    fi
    echo "[bootstrap] creating $venv and installing the stack (a few minutes on a fresh machine)"
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    pip_quiet install --upgrade pip
    pip_quiet install -e ".[ros,dev]"
    echo "$want" >"$stamp"
}

build_interfaces() {
    # The stack's messages (ros2_ws/src/agent_interfaces, ament_cmake + rosidl), built with colcon and
    # installed into the venv beside the ROS wheels: importable, and on the library path the wheels set,
    # without sourcing anything. Rebuilt only when the package or the installed wheels changed.
    local pkg=ros2_ws/src/agent_interfaces stamp="$venv/.interfaces" want
    want=$(cat pyproject.toml "$pkg"/package.xml "$pkg"/CMakeLists.txt "$pkg"/msg/*.msg | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return
    fi
    local tool
    for tool in cmake c++; do
        if ! command -v "$tool" >/dev/null; then
            echo "[bootstrap] $tool not found: agent_interfaces is built with CMake and a C++ compiler" \
                "(e.g. apt install cmake g++)" >&2
            exit 1
        fi
    done
    echo "[bootstrap] building the agent_interfaces messages into $venv (about a minute)"
    local log=ros2_ws/log/agent_interfaces-build.txt
    mkdir -p ros2_ws/log
    if ! AMENT_PREFIX_PATH="$venv" CMAKE_PREFIX_PATH="$venv" "$venv/bin/colcon" --log-base ros2_ws/log build \
        --base-paths "$pkg" --build-base ros2_ws/build --install-base "$venv" --merge-install >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "[bootstrap] building agent_interfaces failed; the whole output is in $log" >&2
        exit 1
    fi
    echo "$want" >"$stamp"
}

pip_quiet() {
    # This machine's pip configuration lists local mirrors that may be absent; drop that noise only.
    "$venv/bin/python" -m pip -q "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
    return "${PIPESTATUS[0]}"
}

export_env() {
    # ros-wheels-bootstrapper re-executes Python with the ROS library path; this picks the DDS layer.
    export RMW_IMPLEMENTATION=rmw_fastrtps_cpp
    export MUJOCO_GL=${MUJOCO_GL:-egl}
    export PATH="$venv/bin:$PATH"
}

STUDENT=sim/robots/diffbot/student  # the committed OPD student (see README: Online Policy Distillation)
cmd=${1:-}
shift || true
case "$cmd" in
    run)
        setup; build_interfaces; export_env
        # The whole ROS 2 graph on the MuJoCo default behind the real-robot proxy: the committed OPD student
        # drives, and the OPD gate hands control to the teacher where the predictor's error is high.
        # Extra arguments override (e.g. --drive teacher).
        echo "[bootstrap] main job: agent run --sim mujoco --proxy --drive opd --artifact $STUDENT --duration 120"
        exec agent run --sim mujoco --proxy --drive opd --artifact "$STUDENT" --duration 120 "$@"
        ;;
    test)
        setup; build_interfaces; export_env
        ruff check .
        ruff format --check .
        lint-imports  # the layering contracts in pyproject.toml
        exec python -m pytest "$@"
        ;;
    setup)
        setup; build_interfaces
        ;;
    *)
        echo "usage: bash bootstrap.sh run|test|setup [args...]" >&2
        exit 2
        ;;
esac
