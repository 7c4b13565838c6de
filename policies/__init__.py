"""ROS-free models of the stack: encoder, hybrid-action policy, state predictor, export and runtimes."""
