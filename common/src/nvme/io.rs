//! NVM command set I/O commands: Read, Write, Flush, Write Zeroes, Dataset Management (with its range list) and Compare.
