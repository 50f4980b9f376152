"""make fuzz: hostile frames into NICs (both engines) and a switch."""
