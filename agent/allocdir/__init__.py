"""An alloc's directories on the host: the template sandbox, safe file operations, host volumes."""
