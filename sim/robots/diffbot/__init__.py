"""The default robot: a differential-drive base with a forward camera and an IMU, in a marker arena."""

# The committed policies of this robot, as paths from the project root (`policies.config.from_root`): the
# teacher every command falls back to when none is named or recorded, and the OPD student `agent run` drives.
TEACHER = "sim/robots/diffbot/teacher/teacher.pt"
STUDENT = "sim/robots/diffbot/student"
