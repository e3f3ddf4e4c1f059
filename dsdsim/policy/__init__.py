"""dsdsim.policy."""
