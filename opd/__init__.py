"""ROS-free learning: the hybrid SAC teacher trainer and Online Policy Distillation."""
