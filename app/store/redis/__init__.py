"""Redis plumbing: connections in every mode, topology, health, memory, what a refusal means."""
