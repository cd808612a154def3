//! NVMe/TCP header and data digests (CRC32C).
