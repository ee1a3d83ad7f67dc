"""The field-bug machinery: the bugs a fault flag puts back, the flags, the kill points."""
