"""The default robot: a differential-drive base with a forward camera and an IMU, in a marker arena."""
