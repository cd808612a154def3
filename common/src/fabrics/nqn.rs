//! NVMe Qualified Names: validation and the well-known discovery NQN.
