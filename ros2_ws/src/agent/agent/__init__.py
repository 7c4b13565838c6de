"""ROS 2 package `agent`: thin nodes over the ROS-free core, the node graph, and the `agent` command line."""
