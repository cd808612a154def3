//! A streaming PDU decoder: accepts bytes in any split and yields whole PDUs, never reading past what arrived.
