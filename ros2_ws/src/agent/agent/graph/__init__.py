"""The ROS 2 node graph of the stack, declared once: nodes, executables, topics, QoS, rates and parameters.

Everything that starts or documents the graph reads this module: `setup.py` (console scripts), the launch
file `launch/bringup.launch.py`, the in-process bringup (`agent.bringup`), the nodes themselves (topic
names, message types and QoS of every publisher and subscription), and `agent.graph.render`, which writes
`config/agent.yaml` and the README's graph section from it (tests keep both equal). It imports nothing but
the standard library, so `setup.py` and the launch file can load it without rclpy, numpy or the models.

Regenerate the parameter file after changing a parameter here, and the README's graph section after
changing a node or topic:
    python -m agent.graph > ros2_ws/src/agent/config/agent.yaml
    python -m agent.graph --readme README.md
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from sim.robots import diffbot

PACKAGE = "agent"
PARAMS_FILE = "agent.yaml"  # under the package share's config/
SIMS = ("none", "mujoco", "isaacsim")
BACKENDS = ("tensorrt", "onnxruntime", "torch")  # policies.runtime.BACKENDS, in the order
EXECUTORS = ("single", "multi")  # executor per node of the in-process bringup (agent.bringup)

ParamValue = bool | int | float | str
# Whose hybrid action the robot executes (`drive`, one launch argument for the opd node and the sim bridge),
# by the topic the opd node acts on. The opd node is the one place the executed action comes from:
# /opd/action and /cmd_vel carry it for every choice. opd = the OPD core's gated choice, made on each state
# embedding (the student's head, or the teacher's action when the predictor's error is high); student or
# teacher = that one alone, to watch it act.
DRIVE_SOURCES = {"opd": "/agent/state", "student": "/agent/action", "teacher": "/teacher/action"}
DRIVES = tuple(DRIVE_SOURCES)


@dataclass(frozen=True)
class Qos:
    """A QoS profile in plain words; `agent.ros_io.qos_profile` turns it into an rclpy QoSProfile."""

    label: str  # name used in docs, e.g. "sensor data"
    reliability: Literal["reliable", "best_effort"]
    durability: Literal["volatile", "transient_local"]
    depth: int  # KEEP_LAST history depth, messages

    def with_depth(self, depth: int) -> Qos:
        return replace(self, depth=depth)


# rclpy's qos_profile_sensor_data: a late frame is worth less than the next one, so never retransmit.
SENSOR_DATA = Qos("sensor data", "best_effort", "volatile", 5)
# Actions and commands must arrive: a lost `stop` is a safety problem.
RELIABLE = Qos("reliable", "reliable", "volatile", 10)
# Only the newest state embedding is worth acting on; depth 1 drops the rest instead of queueing latency.
LATEST = Qos("reliable, latest only", "reliable", "volatile", 1)
# Slow-changing state that a late joiner must still receive (the active skill).
LATCHED = Qos("latched", "reliable", "transient_local", 1)
# rclpy's TimeSource subscribes best-effort depth 1; a reliable publisher serves that and reliable readers.
CLOCK = Qos("clock", "reliable", "volatile", 1)


@dataclass(frozen=True)
class Topic:
    """One topic: name, message type, QoS, nominal rate and meaning."""

    name: str
    msg_type: str  # "pkg/msg/Type"
    qos: Qos
    rate_hz: float  # nominal publish rate, Hz; 0 = on change
    description: str
    global_name: bool = False  # /clock and /diagnostics stay global; the rest live in the nodes' namespace

    @property
    def ros_name(self) -> str:
        """The name entities are created with: relative (resolved in the node's namespace, so two robots
        run side by side) unless global. `name` (absolute) is the topic without a namespace."""
        return self.name if self.global_name else self.name.lstrip("/")


TOPICS: dict[str, Topic] = {
    t.name: t
    for t in (
        Topic("/camera/image_raw", "sensor_msgs/msg/Image", SENSOR_DATA, 20.0,
              "forward camera, rgb8 or bgr8, stamped at exposure"),
        Topic("/camera/camera_info", "sensor_msgs/msg/CameraInfo", SENSOR_DATA, 20.0,
              "the forward camera's calibration (K, D), one per frame: checked against the camera the "
              "student was trained with (the artifact's preprocessing.camera)"),
        # Depth 200 (1 s): the sim bridge publishes each control period's samples together, and after an
        # episode reset the whole settling window (100 samples) at once; none of it may be overwritten.
        Topic("/imu/data", "sensor_msgs/msg/Imu", SENSOR_DATA.with_depth(200), 200.0,
              "IMU: linear acceleration m/s^2, angular velocity rad/s, stamped at measurement"),
        Topic("/agent/active_skill", "sensor_msgs/msg/JointState", LATCHED, 20.0,
              "skill being executed, task progress and step (agent.messages.SKILL_STATE_NAMES)"),
        Topic("/agent/state", "agent_interfaces/msg/StateEmbedding", LATEST, 20.0,
              "state embedding (E,) naming its encoder, stamped with the camera image it was computed from"),
        Topic("/agent/action", "agent_interfaces/msg/HybridAction", RELIABLE, 20.0,
              "student hybrid action (a proposal; /opd/action is executed): skill + contract parameters, "
              "stamped with its state"),
        Topic("/opd/action", "agent_interfaces/msg/HybridAction", RELIABLE, 20.0,
              "executed hybrid action, the one the robot follows: by `drive` the OPD gate's choice, the "
              "student's or the teacher's; the safe action when that source is silent"),
        Topic("/cmd_vel", "geometry_msgs/msg/TwistStamped", RELIABLE, 20.0,
              "base velocity command: the executed action (/opd/action) through the robot's Twist mapping, "
              "stamped when issued (plain Twist with the opd node's cmd_vel_stamped:=false)"),
        Topic("/opd/gate", "agent_interfaces/msg/GateState", RELIABLE, 20.0,
              "OPD gate at each decision: source (student/teacher), reason, error, threshold, context"),
        Topic("/agent/student_version", "std_msgs/msg/String", LATCHED, 0.0,
              "newest student version learnt online (drive opd, learn), announced by the opd node at the "
              "first decision it made: JSON {number, path, stamp (that frame's, s)}, an artifact directory "
              "with hashes; a policy node listening swaps to it between two actions"),
        Topic("/teacher/action", "agent_interfaces/msg/HybridAction", RELIABLE, 20.0,
              "teacher hybrid action on the sim twin's privileged state, stamped with that state"),
        Topic("/sim/privileged_state", "sensor_msgs/msg/JointState", RELIABLE, 20.0,
              "true, undelayed state of the sim twin and its active skill, that the teacher acts on"),
        Topic("/odom", "nav_msgs/msg/Odometry", RELIABLE, 20.0,
              "wheel odometry (dead reckoning from the encoders), stamped at measurement"),
        # Once per control period: every node with use_sim_time subscribes, so a faster clock costs each of
        # them a callback per tick on the shared executor.
        Topic("/clock", "rosgraph_msgs/msg/Clock", CLOCK, 20.0,
              "simulation time (use_sim_time), one tick per control period", global_name=True),
        Topic("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray", RELIABLE, 1.0,
              "per-node health: input rates, latency, backend, dropped and rejected messages",
              global_name=True),
    )
}  # fmt: skip


@dataclass(frozen=True)
class Param:
    """One ROS parameter: default, meaning, unit and admissible values."""

    name: str
    default: ParamValue
    description: str
    unit: str = ""
    low: float | None = None  # inclusive range for int/float parameters
    high: float | None = None
    choices: tuple[str, ...] = ()  # admissible values of a string parameter
    launch_arg: str | None = None  # set from this launch argument instead of the parameter file

    def __post_init__(self) -> None:
        if (self.low is None) != (self.high is None):
            raise ValueError(f"param {self.name}: give both low and high or neither")
        if self.low is not None and not self.low <= self.default <= self.high:  # type: ignore[operator]
            raise ValueError(f"param {self.name}: default {self.default} outside [{self.low}, {self.high}]")
        if self.choices and self.default not in self.choices:
            raise ValueError(f"param {self.name}: default {self.default!r} not in {self.choices}")

    @property
    def type(self) -> type:
        return type(self.default)

    def check(self, value: ParamValue) -> None:
        """Raise ValueError naming the parameter when `value` is not admissible."""
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not self.type:
            raise ValueError(f"parameter {self.name}: expected {self.type.__name__}, got {value!r}")
        if self.low is not None and not self.low <= value <= self.high:  # type: ignore[operator]
            raise ValueError(f"parameter {self.name} = {value} outside [{self.low}, {self.high}] {self.unit}")
        if self.choices and value not in self.choices:
            raise ValueError(f"parameter {self.name} = {value!r}: choose one of {self.choices}")


@dataclass(frozen=True)
class NodeSpec:
    """One node: its executable, its Python class, its topics and its parameters."""

    name: str  # node name, also the key of its section in the parameter file
    module: str  # Python module with the node class and `main(args=None)`
    class_name: str
    description: str
    subscribes: tuple[str, ...]  # topic names (keys of TOPICS)
    publishes: tuple[str, ...]
    params: tuple[Param, ...]
    sim_only: bool = False  # started only when the launch argument `sim` is not `none`
    # The arm switch: the node that commands the robot. The launch file and the in-process bringup
    # configure every node and activate every other one, but this one only when `autostart` says so
    # (`armed`); until then it is configured and publishes no motion. An operator arms it with
    # `ros2 lifecycle set <ns>/opd activate` (or `agent arm`), and disarms it with `deactivate`.
    arms: bool = False
    # Drives under which nothing executes what it computes, so it is not started: with drive opd the opd
    # node's OPD core computes the student's head and the teacher's action itself, and a second copy of
    # either beside it only took the control loop's CPU (issue 58).
    off_with: tuple[str, ...] = ()
    executable: str = field(default="")  # console script under lib/agent; defaults to `name`

    def __post_init__(self) -> None:
        if not self.executable:
            object.__setattr__(self, "executable", self.name)
        unknown = [t for t in self.subscribes + self.publishes if t not in TOPICS]
        if unknown:
            raise ValueError(f"node {self.name}: unknown topics {unknown}")

    @property
    def entry_point(self) -> str:
        """setuptools console script line."""
        return f"{self.executable} = {self.module}:main"

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"node {self.name} has no parameter {name!r}")


@dataclass(frozen=True)
class LaunchArg:
    """A launch argument of bringup.launch.py (also accepted by the in-process bringup)."""

    name: str
    default: str
    description: str
    choices: tuple[str, ...] = ()


AUTOSTART = ("auto", "true", "false")
PRECISIONS = ("", "fp32", "fp16", "int8")

LAUNCH_ARGS: tuple[LaunchArg, ...] = (
    LaunchArg(
        "use_sim_time", "false", "use /clock (published by the sim bridge) as ROS time", ("true", "false")
    ),
    LaunchArg(
        "params_file", "", f"node parameter file (ROS YAML); empty = the package's config/{PARAMS_FILE}"
    ),
    LaunchArg(
        "namespace",
        "",
        "namespace of every node and of its topics (two robots side by side); "
        "/clock and /diagnostics stay global",
    ),
    LaunchArg(
        "autostart",
        "auto",
        "arm the robot on start: the opd node, which commands the base, is "
        "activated (true) or left configured and silent until `ros2 lifecycle set <ns>/opd activate` "
        "(false); auto = true in simulation, false with sim:=none",
        AUTOSTART,
    ),
    LaunchArg("artifact_dir", "", "deployment artifact directory written by `agent export --out DIR`"),
    LaunchArg("backend", "onnxruntime", "inference backend of the encoder and policy", BACKENDS),
    LaunchArg(
        "precision", "", "encoder precision; empty = the backend's default (fp32, TensorRT fp16)", PRECISIONS
    ),
    LaunchArg("sim", "none", "simulator for the sim bridge and teacher; none = real robot", SIMS),
    LaunchArg(
        "drive",
        "opd",
        "whose action the robot executes (the opd node's and the sim bridge's `drive`)",
        DRIVES,
    ),
    LaunchArg(
        "respawn",
        "false",
        "restart a node whose process exits (1 s later), configure it once the dead process has left DDS "
        "discovery (21 s after the restart) and activate it, except the opd node: it comes back disarmed "
        "until a person arms it (the launch file's; `agent run`, one process, ignores it)",
        ("true", "false"),
    ),
)

# Parameters every agent node declares (agent.lifecycle_node.AgentNode).
COMMON_PARAMS: tuple[Param, ...] = (
    Param(
        "autostart",
        False,
        "configure and activate itself on start (`ros2 run`); the launch file and "
        "`agent run` bring the nodes up themselves (launch argument `autostart`)",
    ),
    Param("diagnostics_period_s", 1.0, "period of the /diagnostics report", "s", 0.1, 60.0),
)
_ARTIFACT = Param("artifact_dir", "", "artifact directory from `agent export`", launch_arg="artifact_dir")
_BACKEND = Param("backend", "onnxruntime", "inference backend", choices=BACKENDS, launch_arg="backend")
_THREADS = Param("inference_threads", 0, "intra-op threads of the backend; 0 = backend default", "", 0, 64)
_FUTURE = Param("future_tolerance_s", 0.2, "inputs stamped further ahead of the node's clock are refused, "
                "their stamp not recorded (it would make the next ones look like a clock going back). Above "
                "a control period: under use_sim_time /clock may reach the node after the period's messages",
                "s", 0.0, 10.0)  # fmt: skip
# The sim bridge follows /opd/action whatever `drive` is; it needs `drive` only to know which input the
# executed action answers (its stamp: the image's, or the privileged state's for the teacher).
_DRIVE = Param(
    "drive",
    "opd",
    "whose action the robot executes: opd (the OPD gate's choice), student or teacher",
    choices=DRIVES,
    launch_arg="drive",
)

NODES: tuple[NodeSpec, ...] = (
    NodeSpec(
        "encoder", "agent.nodes.encoder", "EncoderNode",
        "camera + IMU window + active skill -> state embedding, aligned on the image stamp",
        subscribes=("/camera/image_raw", "/camera/camera_info", "/imu/data", "/agent/active_skill"),
        publishes=("/agent/state", "/diagnostics"),
        params=COMMON_PARAMS + (
            _ARTIFACT, _BACKEND, _THREADS,
            Param("precision", "", "encoder precision; empty = the backend's default (fp32, TensorRT fp16); "
                  "int8 needs an artifact exported with --int8 (ONNX Runtime)",
                  choices=PRECISIONS, launch_arg="precision"),
            Param("sync_tolerance_s", 0.01, "max time from the window's last IMU sample (the last at or "
                  "before the image stamp) to the image stamp", "s", 0.0, 0.5),
            Param("imu_future_tolerance_s", 0.2, "IMU samples stamped further ahead of the node's clock are "
                  "refused (a bad clock; the good history is kept). Above a control period: under "
                  "use_sim_time /clock may reach the node after the period's samples", "s", 0.0, 10.0),
            _FUTURE,
            Param("imu_buffer_size", 1000, "IMU samples kept for alignment (>= the model's window)",
                  "", 8, 100000),
            Param("input_timeout_s", 0.5, "no camera or IMU message for this long -> diagnostic ERROR",
                  "s", 0.01, 60.0),
            Param("max_latency_s", 0.3, "images older than this on arrival are dropped as late",
                  "s", 0.001, 10.0),
        ),
    ),
    NodeSpec(
        "policy", "agent.nodes.policy", "PolicyNode",
        "state embedding -> hybrid action within the skill contract -> the student's proposal (not started "
        "with drive opd: the opd node's OPD core computes the same head)",
        subscribes=("/agent/state", "/agent/student_version"),
        publishes=("/agent/action", "/diagnostics"),
        off_with=("opd",),
        params=COMMON_PARAMS + (
            _ARTIFACT, _BACKEND, _THREADS,
            Param("input_timeout_s", 0.5, "no usable state embedding for this long -> safe action + ERROR",
                  "s", 0.01, 60.0),
            _FUTURE,
            Param("safe_keepalive_hz", 1.0, "rate of the safe action while inputs stay stale, after the "
                  "first one (sent on going stale)", "Hz", 0.1, 100.0),
            Param("watchdog_rate_hz", 20.0, "rate of the staleness check", "Hz", 1.0, 1000.0),
        ),
    ),
    NodeSpec(
        "opd", "agent.nodes.opd", "OpdNode",
        "executed action: OPD's gate between student and teacher (or the `drive` source's), or the safe "
        "action when it is silent -> robot command",
        subscribes=("/agent/state", "/agent/action", "/teacher/action", "/sim/privileged_state"),
        publishes=("/opd/action", "/cmd_vel", "/opd/gate", "/agent/student_version", "/diagnostics"),
        arms=True,
        params=COMMON_PARAMS + (
            _ARTIFACT, _DRIVE,
            Param("teacher_checkpoint", "", "teacher.pt of the OPD core (teacher.yaml beside it); empty = "
                  "the teacher the artifact's student was distilled from, else the committed "
                  f"{diffbot.TEACHER}"),
            Param("opd_config", "", "OPD core config (the `opd:` section of a student training YAML); empty "
                  "= opd/configs/live.yaml (the gate as at the end of training)"),
            Param("learn", False, "train the student's head and the predictor online in a learner process"),
            Param("learn_share", 0.25, "with learn: the most of its time the learner process computes; after "
                  "an update it rests in proportion, so the control loop keeps the CPU", "", 0.05, 1.0),
            Param("learn_nice", 19, "with learn: the learner process's nice value: "
                  "the scheduler gives the control loop's threads a core first", "", 0, 19),
            Param("version_every_s", 60.0, "with learn: write the learnt student as a new artifact version "
                  "this often and announce it on /agent/student_version; 0 = never", "s", 0.0, 86400.0),
            Param("versions_dir", "", "where student versions are written (the newest 3 kept); empty = "
                  "~/.cache/agent/versions/<first 12 hex of the artifact's manifest hash>"),
            Param("input_timeout_s", 0.35, "no action from the executed source (the student's, or the "
                  "teacher's with drive teacher) sent for this long -> safe action + ERROR: with the "
                  "watchdog's period and a frame in flight, a stop within 0.5 s of a fault", "s", 0.01, 60.0),
            Param("max_input_age_s", 0.5, "an action answering an input older than this when it would be "
                  "sent is not sent (counted as stale): a starved graph stops on the watchdog rather than "
                  "drive on old frames", "s", 0.01, 60.0),
            Param("safe_keepalive_hz", 1.0, "rate of the safe action while the executed source stays silent, "
                  "after the first one (sent on going silent)", "Hz", 0.1, 100.0),
            Param("watchdog_rate_hz", 50.0, "rate of the staleness check of the executed source",
                  "Hz", 1.0, 1000.0),
            Param("teacher_timeout_s", 1.0, "no teacher action for this long -> diagnostic WARN (the "
                  "teacher is not executed; with drive teacher see input_timeout_s)", "s", 0.01, 60.0),
            Param("cmd_vel_stamped", True, "publish the base command as geometry_msgs/TwistStamped (Jazzy "
                  "and later diff_drive_controller); false = plain Twist"),
            Param("base_frame_id", "base_link", "frame_id of the stamped base command"),
        ),
    ),
    NodeSpec(
        "sim_bridge", "agent.nodes.sim_bridge", "SimBridgeNode",
        "runs a sim/ backend as the robot: camera, IMU, odometry, clock and task state out; hybrid action in",
        subscribes=("/opd/action",),
        publishes=("/clock", "/agent/active_skill", "/sim/privileged_state", "/odom", "/imu/data",
                   "/camera/image_raw", "/camera/camera_info", "/diagnostics"),
        params=COMMON_PARAMS + (
            Param("sim", "mujoco", "simulator backend", choices=SIMS[1:], launch_arg="sim"),
            Param("sim_config", "", "simulator YAML (sim/config.py); empty = the sim package's <sim>.yaml"),
            Param("camera_hz", 20, "camera rate; 20 = one frame per control period, the camera topic's "
                  "rate; 0 = the simulator YAML's", "Hz", 0, 1000),
            Param("camera_width", 0, "camera image width rendered, px; 0 = the simulator YAML's. `agent run` "
                  "sets the artifact's input size, so the student sees frames rendered as in its training "
                  "rather than resized (the vertical field of view is the robot's: a wider frame sees wider)",
                  "px", 0, 2048),
            Param("camera_height", 0, "camera image height rendered, px; 0 = the simulator YAML's",
                  "px", 0, 2048),
            Param("seed", 0, "seed of the first episode; episode i draws its layout from seed + i",
                  "", 0, 2**31 - 1),
            Param("proxy", False, "wrap the backend in the real-robot proxy (latency, noise, randomisation)"),
            Param("proxy_config", "", "real-robot proxy YAML; empty = the sim package default"),
            _DRIVE,
            Param("real_time_factor", 1.0, "simulated seconds per wall second; 0 = lockstep (each period "
                  "as soon as its command arrives); other than 1 needs use_sim_time", "", 0.0, 100.0),
            Param("command_deadline_s", 0.04, "wall time an observation waits for the command that answers "
                  "it; then the robot steps on its last command (a missed cycle)", "s", 0.001, 10.0),
            Param("command_timeout_s", 0.35, "no command for this long (wall time) -> the robot applies the "
                  "contract's safe action from its next step and reports ERROR, until commands return",
                  "s", 0.01, 60.0),
        ),
        sim_only=True,
    ),
    NodeSpec(
        "teacher", "agent.nodes.teacher", "TeacherNode",
        "teacher policy on the sim twin's privileged state -> teacher action (not started with drive opd: "
        "the OPD core runs the teacher the gate executes)",
        subscribes=("/sim/privileged_state",),
        publishes=("/teacher/action", "/diagnostics"),
        off_with=("opd",),
        params=COMMON_PARAMS + (
            _ARTIFACT,
            Param("checkpoint", "", "teacher.pt (teacher.yaml beside it); empty = the teacher the artifact's "
                  f"student was distilled from, else the committed {diffbot.TEACHER}"),
            Param("input_timeout_s", 0.5, "no privileged state for this long -> diagnostic ERROR (the robot "
                  "brakes on its own command timeout)", "s", 0.01, 60.0),
            _FUTURE,
        ),
        sim_only=True,
    ),
)  # fmt: skip


def node(name: str) -> NodeSpec:
    """The node spec called `name`."""
    for spec in NODES:
        if spec.name == name:
            return spec
    raise KeyError(f"no node {name!r}; the graph has {[n.name for n in NODES]}")


def nodes_for(sim: str, drive: str = "opd") -> tuple[NodeSpec, ...]:
    """Nodes started for the launch arguments `sim` and `drive`: the sim bridge and teacher only with a
    simulator, and none under a drive it is `off_with`."""
    if sim not in SIMS:
        raise ValueError(f"sim = {sim!r}: choose one of {SIMS}")
    if drive not in DRIVES:
        raise ValueError(f"drive = {drive!r}: choose one of {DRIVES}")
    return tuple(n for n in NODES if (sim != "none" or not n.sim_only) and drive not in n.off_with)


def armed(args: dict[str, str]) -> bool:
    """Whether the arming node is activated on start, from the launch arguments `autostart` and `sim`."""
    if args["autostart"] not in AUTOSTART:
        raise ValueError(f"autostart = {args['autostart']!r}: choose one of {AUTOSTART}")
    return args["autostart"] == "true" or (args["autostart"] == "auto" and args["sim"] != "none")


def console_scripts() -> list[str]:
    """One console script per node, for setup.py."""
    return [n.entry_point for n in NODES]
