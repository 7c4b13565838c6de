# Headless training on any CPU host, on the MuJoCo default (the same jobs as docker/train.Dockerfile).
#   docker build -f docker/train-cpu.Dockerfile -t agent-train-cpu .
#   docker run --rm -v agent-runs:/runs agent-train-cpu teacher --out /runs/teacher
#   docker run --rm -v agent-runs:/runs agent-train-cpu student --method opd --out /runs/opd
FROM python:3.11-slim-bookworm

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# EGL for MuJoCo's offscreen rendering of the student's camera.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libegl1 libgl1 libglib2.0-0 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/agent/src
COPY pyproject.toml README.md ./
COPY policies ./policies
COPY opd ./opd
COPY sim ./sim
COPY ros2_ws ./ros2_ws
# Editable: configs and the committed teacher resolve against this source tree (sim.config.PROJECT_ROOT).
RUN pip install --no-cache-dir -e .

ENV MUJOCO_GL=egl
VOLUME ["/runs"]
WORKDIR /runs
ENTRYPOINT ["agent", "train"]
CMD ["teacher", "--out", "/runs/teacher"]
