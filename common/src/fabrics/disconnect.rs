//! Fabrics Disconnect.
