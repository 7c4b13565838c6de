"""Simulated (and proxied-real) robots behind one interface: `sim.robot_interface.RobotInterface`.

Importing `sim` is cheap: MuJoCo, Gymnasium and Isaac Sim load only when a backend or the Gymnasium
environment (`sim.gym_env`, which registers `agent/DiffBot-v0`) is imported.
"""
