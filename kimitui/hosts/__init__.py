"""How a GPU host is reached: local, over SSH, or simulated. See base.Host."""
