//! Get Log Page (admin opcode 0x02): the command view and the log pages the target serves: Error Information, SMART / Health Information, Changed Namespace List and Commands Supported and Effects.
