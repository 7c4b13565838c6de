# Headless training on a GPU host with Isaac Sim (5.x: Python 3.11, as the project).
#   docker build -f docker/train.Dockerfile -t agent-train .
#   docker run --rm --gpus all -e ACCEPT_EULA=Y -e PRIVACY_CONSENT=Y -v agent-runs:/runs \
#       -v isaac-cache-kit:/isaac-sim/kit/cache -v isaac-cache-ov:/root/.cache/ov \
#       -v isaac-cache-gl:/root/.cache/nvidia/GLCache -v isaac-cache-compute:/root/.nv/ComputeCache \
#       agent-train teacher --sim isaacsim --out /runs/teacher
#   ... agent-train student --method opd --sim isaacsim --out /runs/opd
# Checkpoints and TensorBoard logs go to /runs (a volume): rerunning the same command resumes. The Kit and
# shader caches are volumes too, so a restarted container does not recompile shaders for minutes.
ARG ISAAC_SIM_IMAGE=nvcr.io/nvidia/isaac-sim:5.0.0
FROM ${ISAAC_SIM_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Isaac Sim's own Python runs everything: its packages (isaacsim, omni.*) stay importable.
WORKDIR /opt/agent/src
COPY pyproject.toml README.md ./
COPY policies ./policies
COPY opd ./opd
COPY sim ./sim
COPY ros2_ws ./ros2_ws
# Editable: configs and the committed teacher resolve against this source tree (sim.config.PROJECT_ROOT).
RUN /isaac-sim/python.sh -m pip install --no-cache-dir -e .

ENV ACCEPT_EULA=Y \
    PRIVACY_CONSENT=Y \
    OMNI_KIT_ACCEPT_EULA=YES \
    MUJOCO_GL=egl
VOLUME ["/runs", "/isaac-sim/kit/cache", "/root/.cache/ov", "/root/.cache/nvidia/GLCache", "/root/.nv/ComputeCache"]
WORKDIR /runs
ENTRYPOINT ["/isaac-sim/python.sh", "-m", "agent.cli", "train"]
CMD ["teacher", "--sim", "isaacsim", "--out", "/runs/teacher"]
