//! Get Features / Set Features (admin opcodes 0x0A / 0x09): command views and the feature values we support.
