# The robot image: the agent's ROS 2 graph on the image's own ROS (kilted, Ubuntu noble, amd64).
#   docker build -f docker/robot.Dockerfile -t agent-robot .
#   docker run --rm -it --network host -v /path/to/artifact:/artifact:ro -v agent-cache:/cache agent-robot \
#       backend:=tensorrt
# Launch arguments pass through to `ros2 launch agent bringup.launch.py` (artifact_dir defaults to /artifact).
# The stack starts disarmed on a robot: arm it with `ros2 lifecycle set /opd activate` (README: On a robot).
# arm64 / Jetson: build with BASE_IMAGE set to a JetPack 6 ROS image (see README: Deployment) and
# TORCH_INDEX to NVIDIA's Jetson wheel index.
ARG BASE_IMAGE=ros:kilted-ros-base
FROM ${BASE_IMAGE}

# Extra pip index for torch (e.g. NVIDIA's Jetson wheels); empty = PyPI, as the pins in pyproject.toml.
ARG TORCH_INDEX=""
ARG EXTRAS=""
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Python tooling and the libraries the nodes import that Ubuntu packages (package.xml's rosdep keys).
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-venv python3-pip python3-numpy python3-yaml \
       libegl1 libgl1 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/agent/src
COPY pyproject.toml README.md ./
COPY policies ./policies
COPY opd ./opd
COPY sim ./sim
COPY ros2_ws ./ros2_ws
# The ROS-free core and its Python dependencies in a venv that also sees the image's ROS (rclpy comes from
# /opt/ros, not from PyPI: the `ros` extra is left out). EXTRAS=tensorrt adds TensorRT 10 on GPU hosts.
# Editable: configs and the committed teacher resolve against this source tree (sim.config.PROJECT_ROOT).
RUN python3 -m venv --system-site-packages /opt/agent/venv \
    && /opt/agent/venv/bin/pip install --no-cache-dir ${TORCH_INDEX:+--extra-index-url "${TORCH_INDEX}"} \
       -e ".${EXTRAS:+[${EXTRAS}]}"

# The ROS packages, built against the image's ROS: agent_interfaces (the stack's messages; ament_cmake and
# the rosidl generators come with ros-base) and agent (the nodes and the launch file).
RUN source /opt/ros/"${ROS_DISTRO}"/setup.bash \
    && colcon build --base-paths ros2_ws/src --build-base /opt/agent/build --install-base /opt/agent/install \
    && rm -rf /opt/agent/build log

COPY docker/fastdds.xml /opt/agent/fastdds.xml
COPY docker/robot-entrypoint.sh /opt/agent/entrypoint.sh
# XDG_CACHE_HOME: TensorRT engines are cached under it (keyed by ONNX hash, TensorRT version, GPU and
# precision); mount a volume there so an engine is built once per GPU, on the first start.
ENV RMW_IMPLEMENTATION=rmw_fastrtps_cpp \
    FASTDDS_DEFAULT_PROFILES_FILE=/opt/agent/fastdds.xml \
    FASTRTPS_DEFAULT_PROFILES_FILE=/opt/agent/fastdds.xml \
    XDG_CACHE_HOME=/cache \
    MUJOCO_GL=egl \
    PATH=/opt/agent/venv/bin:${PATH}
VOLUME ["/cache"]
WORKDIR /opt/agent
ENTRYPOINT ["/opt/agent/entrypoint.sh"]
CMD []
