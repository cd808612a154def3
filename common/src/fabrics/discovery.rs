//! The Discovery Log Page (log identifier 0x70): 1024-byte header and 1024-byte entries.
