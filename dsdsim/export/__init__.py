"""dsdsim.export."""
