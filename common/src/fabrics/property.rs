//! Fabrics Property Get / Property Set and the controller properties they reach: CAP, VS, CC, CSTS.
