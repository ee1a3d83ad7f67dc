"""The nouns every part shares, lowest in the house (Nomad's nomad/structs)."""
