#!/usr/bin/env bash
# Entry point of the robot image: the image's ROS, the agent's package, then the launch file.
#   robot-entrypoint.sh [name:=value ...]   launch arguments of bringup.launch.py (artifact_dir:=/artifact
#                                           unless given)
#   robot-entrypoint.sh build-engines       build and cache the TensorRT engines of /artifact, then exit
#   robot-entrypoint.sh <command ...>       any other command in the same environment (e.g. bash, agent arm)
set -eo pipefail
# shellcheck source=/dev/null
source "/opt/ros/${ROS_DISTRO}/setup.bash"
# shellcheck source=/dev/null
source /opt/agent/install/setup.bash
export PATH="/opt/agent/venv/bin:${PATH}"

if [ "${1:-}" = "build-engines" ]; then
    # Ahead of time: the engines land in $XDG_CACHE_HOME/agent/tensorrt, where the nodes look first.
    exec python3 -c 'import sys; from policies.runtime import load_student; \
rt = load_student(sys.argv[1], backend="tensorrt"); print("engines ready for", sys.argv[1], rt.precision)' \
        "${ARTIFACT_DIR:-/artifact}"
fi
if [ $# -eq 0 ] || [[ "$1" == *":="* ]]; then
    args=("$@")
    [[ " $* " == *" artifact_dir:="* ]] || args+=("artifact_dir:=${ARTIFACT_DIR:-/artifact}")
    exec ros2 launch agent bringup.launch.py "${args[@]}"
fi
exec "$@"
