//! Cross-crate integration tests and the test VM harness.
