//! Fabrics Connect: the command view and the 1024-byte Connect data.
