//! The remaining admin commands: Keep Alive, Asynchronous Event Request (with the completion dword 0 encoding of an asynchronous event) and Abort.
