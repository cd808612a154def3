//! NVMe/TCP PDUs: the common header and every PDU type.
